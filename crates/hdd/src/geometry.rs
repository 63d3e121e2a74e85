//! Logical-to-physical mapping: LBA to cylinder, surface, sector and angle.
//!
//! Within a zone, LBAs fill sparing ranges in order: a range is
//! `spare_range_tracks` tracks whose last (or, with `spares_at_front`,
//! first) `spare_sectors_per_range` sectors are spares. The zone's front
//! empty space is counted in LBAs, as DiskSim's `deadspace`: with ranges
//! it covers whole ranges, their spares included. A slipped sector
//! pushes every later LBA of its range one sector on (into the spares). Track `t` of a zone starts at angle
//! `offset + track_skew * switches + cylinder_skew * cylinders` (in sectors),
//! where `switches` counts head switches since the zone's first track, as in
//! DiskSim's layout model.

use crate::params::{DiskParams, Zone};

/// A physical position of one LBA.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pbn {
    /// Cylinder.
    pub cylinder: u32,
    /// Surface (head).
    pub surface: u32,
    /// Physical sector index on the track.
    pub sector: u32,
    /// Index of the zone in `DiskParams::zones`.
    pub zone_index: u32,
    /// LBAs from this one that lie contiguously on this track (>= 1).
    pub run_sectors: u64,
    /// Angle of the sector's start, as a fraction of a revolution in [0, 1).
    pub angle: f64,
}

/// Map an LBA to its physical position. LBAs past the mapped range land on
/// the last mapped sector (callers clamp requests before they get here).
pub fn map(params: &DiskParams, lba: u64) -> Pbn {
    let mapped = params.mapped_sector_count();
    assert!(mapped > 0);
    let lba = lba.min(mapped - 1);
    let zone_index = params.zones.partition_point(|zone| zone.first_lba + zone.lba_count <= lba);
    assert!(zone_index < params.zones.len());
    let zone = &params.zones[zone_index];
    assert!(lba >= zone.first_lba);
    map_in_zone(zone, params.surface_count, lba - zone.first_lba, zone_index as u32)
}

fn map_in_zone(zone: &Zone, surface_count: u32, zone_lba: u64, zone_index: u32) -> Pbn {
    let range_physical = zone.range_physical_sectors(surface_count);
    let range_usable = zone.range_usable_sectors(surface_count);
    assert!(range_usable > 0);
    // DiskSim counts the front empty space in LBAs (`g1_ltop_*` add
    // `deadspace` to the LBA before dividing by the LBAs per range): with
    // spares in every range it covers whole ranges, spares included.
    let (range_start, within) =
        if zone.spare_range_tracks == 0 || zone.spare_range_tracks >= zone.track_count(surface_count) {
            (zone.front_empty_sectors, zone_lba)
        } else {
            let shifted = zone_lba + zone.front_empty_sectors;
            ((shifted / range_usable) * range_physical, shifted % range_usable)
        };
    let front_spares = if zone.spares_at_front { zone.spare_sectors_per_range } else { 0 };
    let mut physical = range_start + front_spares + within;
    let first_slip = zone.slips.partition_point(|slip| *slip < range_start);
    let mut next_slip = u64::MAX;
    for slip in &zone.slips[first_slip..] {
        if *slip <= physical {
            physical += 1;
        } else {
            next_slip = *slip;
            break;
        }
    }
    let sectors_per_track = u64::from(zone.sectors_per_track);
    let track_max = zone.track_count(surface_count) - 1;
    let track = (physical / sectors_per_track).min(track_max);
    let sector = physical % sectors_per_track;
    let run_sectors = (sectors_per_track - sector)
        .min(range_usable - within)
        .min(next_slip.saturating_sub(physical))
        .max(1);
    let surfaces = u64::from(surface_count);
    let cylinder_in_zone = track / surfaces;
    let surface = track % surfaces;
    let switches = surface + (surfaces - 1) * cylinder_in_zone;
    let skew_sectors = zone.first_sector_offset_sectors
        + zone.track_skew_sectors * switches as f64
        + zone.cylinder_skew_sectors * cylinder_in_zone as f64;
    let angle = ((sector as f64 + skew_sectors) / sectors_per_track as f64).fract();
    assert!((0.0..1.0).contains(&angle));
    Pbn {
        cylinder: zone.first_cylinder + cylinder_in_zone as u32,
        surface: surface as u32,
        sector: sector as u32,
        zone_index,
        run_sectors,
        angle,
    }
}

/// Time until the sector at `angle` comes under the head, from `now_ns`.
/// The platter is at angle 0 at time 0 and turns one revolution per `revolution_ns`.
pub fn rotation_wait_ns(revolution_ns: u64, now_ns: u64, angle: f64) -> u64 {
    assert!(revolution_ns > 0);
    assert!((0.0..1.0).contains(&angle));
    let position_ns = now_ns % revolution_ns;
    let target_ns = (angle * revolution_ns as f64) as u64;
    if target_ns >= position_ns {
        target_ns - position_ns
    } else {
        revolution_ns - position_ns + target_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_empty_space_is_counted_in_lbas_when_every_track_has_spares() {
        // DiskSim's `g1_ltop_sectpertrackspare` adds the empty space to the
        // LBA before dividing by the LBAs per track: with one spare per
        // track, an empty space of three tracks' LBAs puts LBA 0 at the
        // start of track 3, not three sectors before its end.
        let mut params = DiskParams::preset("wd800").unwrap();
        let surfaces = u64::from(params.surface_count);
        let track = |pbn: Pbn| u64::from(pbn.cylinder) * surfaces + u64::from(pbn.surface);
        let zone = &mut params.zones[0];
        zone.spare_range_tracks = 1;
        zone.spare_sectors_per_range = 1;
        let usable = u64::from(zone.sectors_per_track) - 1;
        zone.front_empty_sectors = 3 * usable;
        params.finalize().unwrap();
        let first = map(&params, 0);
        assert_eq!((track(first), first.sector, first.run_sectors), (3, 0, usable));
        let next = map(&params, usable);
        assert_eq!((track(next), next.sector), (4, 0));
    }

    #[test]
    fn spares_at_the_front_of_a_range_push_its_first_lba_past_them() {
        let mut params = DiskParams::preset("wd800").unwrap();
        let surfaces = u64::from(params.surface_count);
        let zone = &mut params.zones[0];
        zone.spare_range_tracks = surfaces; // one cylinder per range
        zone.spare_sectors_per_range = 3;
        let spt = u64::from(zone.sectors_per_track);
        let usable = surfaces * spt - 3;
        params.finalize().unwrap();
        assert_eq!(map(&params, 0).sector, 0);
        params.zones[0].spares_at_front = true;
        params.finalize().unwrap();
        let first = map(&params, 0);
        assert_eq!((first.cylinder, first.surface, first.sector), (0, 0, 3));
        // The last LBA of the range ends the cylinder; the next range starts
        // after the next cylinder's spares.
        let last = map(&params, usable - 1);
        assert_eq!(
            (last.cylinder, last.surface, u64::from(last.sector)),
            (0, params.surface_count - 1, spt - 1)
        );
        let next = map(&params, usable);
        assert_eq!((next.cylinder, next.surface, next.sector), (1, 0, 3));
    }
}
