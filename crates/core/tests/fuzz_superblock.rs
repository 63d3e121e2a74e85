//! Byte-mutation fuzzing of the superblock decoder (proptest; a bounded
//! pass in the default suite, `PROPTEST_CASES=100000` for a long one).
//! Raw mutations must be caught by the crc; crafted ones (fields set to
//! hostile values, crc recomputed) by the range checks. Decoding never
//! panics, and what decodes re-encodes and yields sizes that do not wrap.

use layoutd_core::config::StackConfig;
use layoutd_core::superblock::{Superblock, DATA_START_BYTES, SUPERBLOCK_BYTES};
use proptest::prelude::*;

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

fn put(b: &mut [u8], at: usize, value: u64, width: usize) {
    for i in 0..width {
        if at + i < b.len() {
            b[at + i] = (value >> (8 * i)) as u8;
        }
    }
}

fn nasty() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(1 << 50),
        Just(1 << 62),
        Just(u64::from(u32::MAX)),
        any::<u64>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn superblocks_never_panic(
        raw in prop::collection::vec((0..SUPERBLOCK_BYTES, any::<u8>()), 0..16),
        crafted in prop::collection::vec((0..128usize, nasty(), prop_oneof![Just(1usize), Just(4), Just(8)]), 0..6),
        fix in any::<bool>(),
        second_copy_valid in any::<bool>(),
    ) {
        let mut b = sample().encode().expect("encodes");
        for &(at, v) in &raw { b[at] = v; }
        for &(at, v, w) in &crafted { put(&mut b, at, v, w); }
        if fix {
            // The metadata block's crc32c: at 28, over the block with it zeroed.
            b[28..32].fill(0);
            let crc = crc32c::crc32c(&b);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
        }
        let other = if second_copy_valid {
            let mut s = sample();
            s.generation = 7;
            s.encode().expect("encodes")
        } else {
            vec![0u8; SUPERBLOCK_BYTES]
        };
        for both in [[b.clone(), other.clone()].concat(), [other, b].concat()] {
            if let Ok(sb) = Superblock::decode(&both) {
                let _ = sb.encode().expect("what decodes re-encodes");
                // The sizes a volume derives from it cannot wrap.
                assert!(sb.device_size_bytes >= sb.data_start_bytes);
                for m in &sb.config.device {
                    assert!(m.size_bytes >= sb.data_start_bytes);
                }
            }
        }
    }
}
