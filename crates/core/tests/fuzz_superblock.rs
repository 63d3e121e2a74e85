//! Byte-mutation fuzzing of the superblock decoder and of the shared
//! metadata block codec and journal records (proptest; a bounded
//! pass in the default suite, `PROPTEST_CASES=100000 cargo test -p layoutd-core --test
//! fuzz_superblock` for a long one).
//! Raw mutations must be caught by the crc; crafted ones (fields set to
//! hostile values, crc recomputed) by the range checks. Decoding never
//! panics, and what decodes re-encodes and yields sizes that do not wrap.

use layoutd_core::config::StackConfig;
use layoutd_core::metablock::{JournalRecord, MetaBlockCodec, GENERATION_READ_MAX};
use layoutd_core::superblock::{Superblock, DATA_START_BYTES, SUPERBLOCK_BYTES};
use proptest::prelude::*;

#[path = "support/fuzz.rs"]
mod fuzz;
use fuzz::{allocation_bound, config, fix_crc, largest_allocation, put};

fn sample() -> Superblock {
    Superblock {
        generation: 6,
        clean: true,
        device_size_bytes: 64 << 20,
        data_start_bytes: DATA_START_BYTES,
        uuid: [9; 16],
        config: StackConfig::default_linear(),
        member_index: 0,
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn superblocks_never_panic(
        raw in prop::collection::vec((0..SUPERBLOCK_BYTES, any::<u8>()), 0..16),
        crafted in prop::collection::vec((0..128usize, fuzz::nasty(), prop_oneof![Just(1usize), Just(4), Just(8)]), 0..6),
        fix in any::<bool>(),
        second_copy_valid in any::<bool>(),
    ) {
        let mut b = sample().encode().expect("encodes");
        for &(at, v) in &raw { b[at] = v; }
        for &(at, v, w) in &crafted { put(&mut b, at, v, w); }
        if fix {
            let n = b.len();
            fix_crc(&mut b, 28, n);
        }
        let other = if second_copy_valid {
            let mut s = sample();
            s.generation = 7;
            s.encode().expect("encodes")
        } else {
            vec![0u8; SUPERBLOCK_BYTES]
        };
        for both in [[b.clone(), other.clone()].concat(), [other, b].concat()] {
            let (decoded, bytes) = largest_allocation(|| Superblock::decode(&both));
            prop_assert!(bytes <= allocation_bound(both.len()), "{} bytes allocated", bytes);
            if let Ok(sb) = decoded {
                let _ = sb.encode().expect("what decodes re-encodes");
                // The sizes a volume derives from it cannot wrap.
                assert!(sb.device_size_bytes >= sb.data_start_bytes);
                for m in &sb.config.device {
                    assert!(m.size_bytes >= sb.data_start_bytes);
                }
            }
        }
    }

    /// The codec every metadata block goes through, and the journal
    /// records every target's journal is made of: what decodes is within
    /// its block, and records that decode re-encode to the same bytes.
    #[test]
    fn metablocks_and_journal_records_never_panic(
        raw in fuzz::raw_writes(4096),
        crafted in fuzz::crafted_writes(96),
        fix in any::<bool>(),
        block_bytes in prop_oneof![Just(512usize), Just(4096)],
    ) {
        let codec = MetaBlockCodec { magic: *b"LDFUZZ01", version: 2, block_bytes };
        let records = [
            JournalRecord::MapUpdate { upper: 10, count: 3, lower: 900 },
            JournalRecord::MapRemove { upper: 10, count: 1 },
            JournalRecord::Dirty { block: 77, dirty: true },
            JournalRecord::Exception { volume: 2, chunk: 5, location: 4096 },
            JournalRecord::SegmentUsage { segment: 9, valid: 30, written_at: 1234 },
            JournalRecord::ExceptionRange { volume: 3, chunk: 7, count: 40, location: 9000 },
        ];
        let mut payload = Vec::new();
        records.iter().for_each(|r| r.encode(&mut payload));
        let mut b = codec.encode(5, &payload).expect("fits");
        fuzz::mutate(&mut b, &raw, &crafted);
        if fix {
            fix_crc(&mut b, 28, block_bytes);
        }
        let (decoded, bytes) = largest_allocation(|| codec.decode(&b).map(|d| (JournalRecord::decode_all(&d.payload), d)));
        prop_assert!(bytes <= allocation_bound(b.len()), "{} bytes allocated", bytes);
        if let Ok((records, d)) = decoded {
            prop_assert!(d.payload.len() <= codec.payload_bytes_max());
            prop_assert!(d.generation <= GENERATION_READ_MAX);
            if let Ok(rs) = records {
                let mut again = Vec::new();
                rs.iter().for_each(|r| r.encode(&mut again));
                prop_assert_eq!(again, d.payload);
            }
        }
        let other = codec.encode(6, &payload).expect("fits");
        if let Ok(p) = codec.pick(&b, &other) {
            prop_assert!(p.copy < 2);
        }
    }
}
