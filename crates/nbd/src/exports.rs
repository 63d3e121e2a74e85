//! Named exports: a volume whose stack holds several volumes (the `pool`
//! target, which answers `snapshot list`) is served as one NBD export per
//! volume, by name, the origin being the default export; any other stack
//! is one export as before.
//!
//! The `nbdkit` crate (0.3) registers no `list_exports` / `default_export`
//! callbacks, so [`extend`] copies the plugin struct it builds into a
//! longer one with them appended, in the order of `struct nbdkit_plugin`
//! (after `after_fork`: `list_exports`, `default_export`,
//! `export_description`), and sets `_struct_size` to match.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

extern "C" {
    fn nbdkit_add_export(exports: *mut c_void, name: *const c_char, description: *const c_char) -> c_int;
    fn nbdkit_use_default_export(exports: *mut c_void) -> c_int;
}

/// One volume of a multi-volume stack: `(name, offset, size, read-only)`.
pub(crate) type VolumeRange = (String, u64, u64, bool);

/// The volumes of the stack, if it holds several (`snapshot list`).
pub(crate) fn volumes(live: &layoutd_runtime::live::LiveVolume) -> Option<Vec<VolumeRange>> {
    let reply = live.message("snapshot list").ok()?;
    let mut out = Vec::new();
    for line in reply.lines() {
        let mut words = line.split_whitespace();
        let name = words.next()?.to_string();
        let kv: std::collections::HashMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
        let ro = kv.get("mode") == Some(&"ro");
        out.push((name, kv.get("offset_bytes")?.parse().ok()?, kv.get("size_bytes")?.parse().ok()?, ro));
    }
    Some(out)
}

/// The export `name` ("" = the default: the origin) of a multi-volume stack.
pub(crate) fn find(volumes: &[VolumeRange], name: &str) -> Option<(u64, u64, bool)> {
    let name = if name.is_empty() { "origin" } else { name };
    volumes.iter().find(|v| v.0 == name).map(|v| (v.1, v.2, v.3))
}

#[repr(C)]
struct Extended {
    base: nbdkit::Plugin,
    list_exports: Option<extern "C" fn(c_int, c_int, *mut c_void) -> c_int>,
    default_export: Option<extern "C" fn(c_int, c_int) -> *const c_char>,
    export_description: Option<extern "C" fn(*mut c_void) -> *const c_char>,
}

// SAFETY: only read by nbdkit after `plugin_init`; the pointers in it are
// static strings and functions.
unsafe impl Sync for Extended {}
unsafe impl Send for Extended {}

static EXTENDED: OnceLock<Extended> = OnceLock::new();
static ORIGIN: OnceLock<CString> = OnceLock::new();

extern "C" fn list_exports(_readonly: c_int, _is_tls: c_int, exports: *mut c_void) -> c_int {
    let listed = std::panic::catch_unwind(|| {
        let vols = crate::LIVE.get().and_then(|live| volumes(live))?;
        for (name, ..) in vols {
            let name = CString::new(name).ok()?;
            // SAFETY: `exports` is nbdkit's handle for this call; it copies the strings.
            if unsafe { nbdkit_add_export(exports, name.as_ptr(), std::ptr::null()) } != 0 {
                return None;
            }
        }
        Some(())
    });
    match listed {
        Ok(Some(())) => 0,
        // SAFETY: as above.
        _ => unsafe { nbdkit_use_default_export(exports) },
    }
}

extern "C" fn default_export(_readonly: c_int, _is_tls: c_int) -> *const c_char {
    let multi = crate::LIVE.get().and_then(|live| volumes(live)).is_some();
    if multi {
        ORIGIN.get_or_init(|| CString::new("origin").expect("no NUL")).as_ptr()
    } else {
        c"".as_ptr()
    }
}

/// The crate's plugin struct with the export callbacks appended.
pub(crate) fn extend(base: *const nbdkit::Plugin) -> *const nbdkit::Plugin {
    // SAFETY: `base` points at the crate's plugin struct, valid for the
    // life of the process; it is plain data (pointers) and copied once.
    let mut copy: nbdkit::Plugin = unsafe { std::ptr::read(base) };
    copy._struct_size = std::mem::size_of::<Extended>() as u64;
    let ext = EXTENDED.get_or_init(|| Extended {
        base: copy,
        list_exports: Some(list_exports),
        default_export: Some(default_export),
        export_description: None,
    });
    &ext.base as *const nbdkit::Plugin
}
