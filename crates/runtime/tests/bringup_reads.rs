//! A volume's stack is brought up once per open, whatever its layers: the
//! bytes read from the devices by `open` are those of one bring-up (as
//! `inspect`, one bring-up over an overlay, reads them), not two. On a
//! real disk these reads are the cost of an open (a 1 TiB log reads its
//! 1.8 GiB map area). Counted with the process's own read counter
//! (`rchar` in /proc/self/io), so this file holds one test: no other
//! thread reads meanwhile.

use layoutd_core::config::StackConfig;
use layoutd_runtime::volume::{self, FormatOptions};
use std::path::PathBuf;

mod rchar;
use rchar::read_by;

#[test]
fn a_stack_of_two_layers_is_brought_up_once_per_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, toml) in [
        ("pool over log", "version = 1\n[[layer]]\ntarget = \"pool\"\n[[layer]]\ntarget = \"log\"\n"),
        (
            "opt over dcd",
            "version = 1\n[[layer]]\ntarget = \"opt\"\nopt_length = \"8MiB\"\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"8MiB\"\n",
        ),
        ("log alone", "version = 1\n[[layer]]\ntarget = \"log\"\n"),
    ] {
        let path = dir.path().join(name.replace(' ', "-"));
        std::fs::File::create(&path).and_then(|f| f.set_len(1 << 30)).expect("device file");
        let paths: Vec<PathBuf> = vec![path];
        let cfg = StackConfig::parse(toml, "test").expect("config");
        volume::format(&paths, &cfg, &FormatOptions { uuid: [7; 16], ..FormatOptions::default() })
            .expect("format");
        // Twice, so the second open finds the first one's bring-up
        // writes as any later open does.
        for round in 0..2 {
            let (inspected, once) = read_by(|| volume::inspect_stack(&paths));
            inspected.expect("inspect");
            let (vol, opened) = read_by(|| volume::open(&paths, false));
            let vol = vol.expect("open");
            volume::mark_clean(&vol.members).expect("mark clean");
            drop(vol);
            eprintln!("{name}, open {round}: inspect read {once} bytes, open {opened}");
            assert!(once > 256 << 10, "{name}: one bring-up reads the stack's metadata ({once} bytes)");
            // The open also reads the superblocks again (to mark the
            // member dirty): 32 KiB, a small part of a bring-up's reads.
            assert!(
                opened < once * 3 / 2,
                "{name}, open {round}: open read {opened} bytes, one bring-up reads {once}: the stack was \
                 brought up more than once"
            );
        }
    }
}
