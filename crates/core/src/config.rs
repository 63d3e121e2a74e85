//! The stack description: a small TOML file, stored verbatim (normalised) in
//! the superblock.
//!
//! ```toml
//! version = 1
//! [[layer]]              # top first
//! target = "linear"
//! [[layer.segment]]      # each segment maps the next slice of the volume
//! offset = "0"           # where on the lower device (sizes: 4096, "64MiB", "1G")
//! length = "1GiB"        # omitted on the last segment: to the end of the device
//! ```
//!
//! Each target parses its own keys with an [`ArgReader`], which refuses
//! unknown keys by name so a typo never silently falls back to a default.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The version of the config format this build writes and reads.
pub const CONFIG_VERSION: u32 = 1;

/// A whole stack description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackConfig {
    /// Config format version; must be [`CONFIG_VERSION`].
    pub version: u32,
    /// The layers, top first.
    pub layer: Vec<LayerConfig>,
    /// The member devices of a volume that spans several (written by
    /// `format` from its `--device` options; empty for one device).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device: Vec<MemberConfig>,
    /// The background scheduler (`[background]`); absent: the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<BackgroundConfig>,
}

/// `[background]`: how background work (destage, cleaning, replication,
/// reorganisation) is scheduled across the layers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundConfig {
    /// Bytes per second of background I/O other than forced work (which
    /// foreground requests wait for, never limited): `"20MiB"`, `1048576`.
    /// Absent: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<toml::Value>,
}

impl BackgroundConfig {
    /// The scheduler configuration, or what is wrong with the keys.
    pub fn scheduler(&self) -> Result<crate::background::SchedulerConfig, ConfigError> {
        let rate = match &self.rate {
            None => None,
            Some(v) => {
                let r = parse_size(v).map_err(|e| ConfigError(format!("[background] rate: {e}")))?;
                if r == 0 {
                    return Err(ConfigError(
                        "[background] rate: 0 would stop destage and cleaning for good; leave the key out for no limit"
                            .into(),
                    ));
                }
                Some(r)
            }
        };
        Ok(crate::background::SchedulerConfig { rate_bytes_per_s: rate })
    }
}

/// One member device of a multi-device volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    /// The member's size when formatted.
    pub size_bytes: u64,
}

/// One layer: its target type and that target's own keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerConfig {
    /// The target type: `linear`, `trace`, ...
    pub target: String,
    /// Everything else, parsed by the target.
    #[serde(flatten)]
    pub args: toml::Table,
}

/// A config that cannot be used, with the reason in words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl StackConfig {
    /// The default stack: one `linear` target over the whole device.
    pub fn default_linear() -> StackConfig {
        let mut args = toml::Table::new();
        let mut seg = toml::Table::new();
        seg.insert("offset".into(), toml::Value::Integer(0));
        args.insert("segment".into(), toml::Value::Array(vec![toml::Value::Table(seg)]));
        StackConfig {
            version: CONFIG_VERSION,
            layer: vec![LayerConfig { target: "linear".into(), args }],
            device: Vec::new(),
            background: None,
        }
    }

    /// Parses TOML text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<StackConfig, ConfigError> {
        let cfg: StackConfig = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("{line}:{column}:")
            });
            ConfigError(format!(
                "{origin}:{} {}",
                at.unwrap_or_default(),
                e.message().trim().replace('\n', "; ")
            ))
        })?;
        if cfg.version != CONFIG_VERSION {
            return Err(ConfigError(format!(
                "{origin}: config version {} is not supported (this build reads version {CONFIG_VERSION})",
                cfg.version
            )));
        }
        if cfg.layer.is_empty() {
            return Err(ConfigError(format!("{origin}: no [[layer]]: a stack needs at least one target")));
        }
        Ok(cfg)
    }

    /// Normalised TOML text of this config.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a parsed config serialises")
    }
}

/// Parses a size: an integer of bytes, or a string like `"4096"`, `"64KiB"`,
/// `"1M"`, `"2GiB"`, `"1T"` (binary multiples: K, M, G, T with optional `iB`).
pub fn parse_size(v: &toml::Value) -> Result<u64, String> {
    match v {
        toml::Value::Integer(i) => u64::try_from(*i).map_err(|_| format!("{i} is negative")),
        toml::Value::String(s) => parse_size_str(s),
        other => Err(format!("expected a size such as 4096 or \"64MiB\", found {other}")),
    }
}

/// [`parse_size`] for a string.
pub fn parse_size_str(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (try 4096, \"64MiB\", \"1G\")"))?;
    let shift = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{s:?} has an unknown unit (use K, M, G or T, optionally with iB)")),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{s:?} is too large"))
}

/// The longest duration a config may give in milliseconds: ten years.
pub const MS_MAX: u64 = 10 * 365 * 24 * 3_600_000;

/// Reads a target's keys strictly: every key must be consumed, and errors
/// name the target and the key.
pub struct ArgReader<'a> {
    context: String,
    table: &'a toml::Table,
    used: BTreeSet<String>,
}

impl<'a> ArgReader<'a> {
    /// A reader over `table`; `context` (like `layer 1 (linear)`) prefixes errors.
    pub fn new(context: impl Into<String>, table: &'a toml::Table) -> ArgReader<'a> {
        ArgReader { context: context.into(), table, used: BTreeSet::new() }
    }

    /// An error prefixed with the context.
    pub fn error(&self, msg: impl std::fmt::Display) -> ConfigError {
        ConfigError(format!("{}: {msg}", self.context))
    }

    fn take(&mut self, key: &str) -> Option<&'a toml::Value> {
        self.used.insert(key.to_string());
        self.table.get(key)
    }

    /// An optional size.
    pub fn size_opt(&mut self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => parse_size(v).map(Some).map_err(|e| self.error(format!("key `{key}`: {e}"))),
        }
    }

    /// An optional unsigned integer.
    pub fn u64_opt(&mut self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.take(key) {
            None => Ok(None),
            Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Some(*i as u64)),
            Some(v) => Err(self.error(format!("key `{key}`: expected a non-negative integer, found {v}"))),
        }
    }

    /// An optional duration in milliseconds: a non-negative integer of at
    /// most [`MS_MAX`] (ten years), so the nanoseconds a target computes
    /// from it (`ms * 1_000_000`, added to a clock) cannot overflow.
    pub fn ms_opt(&mut self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.u64_opt(key)? {
            Some(ms) if ms > MS_MAX => {
                Err(self.error(format!("key `{key}`: {ms} ms is more than ten years ({MS_MAX} ms at most)")))
            }
            other => Ok(other),
        }
    }

    /// An optional string.
    pub fn str_opt(&mut self, key: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.take(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.error(format!("key `{key}`: expected a string, found {v}"))),
        }
    }

    /// An optional boolean.
    pub fn bool_opt(&mut self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.take(key) {
            None => Ok(None),
            Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => Err(self.error(format!("key `{key}`: expected true or false, found {v}"))),
        }
    }

    /// An optional array of tables (`[[layer.segment]]`).
    pub fn tables_opt(&mut self, key: &str) -> Result<Option<Vec<&'a toml::Table>>, ConfigError> {
        match self.take(key) {
            None => Ok(None),
            Some(toml::Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_table().ok_or_else(|| self.error(format!("key `{key}`: expected [[{key}]] tables")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(self.error(format!("key `{key}`: expected [[{key}]] tables, found {v}"))),
        }
    }

    /// Fails if any key was not consumed, naming it.
    pub fn finish(self) -> Result<(), ConfigError> {
        let unknown: Vec<&String> = self.table.keys().filter(|k| !self.used.contains(*k)).collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let known: Vec<&str> = self.used.iter().map(|s| s.as_str()).collect();
        Err(self.error(format!(
            "unknown key{} {} (known: {})",
            if unknown.len() > 1 { "s" } else { "" },
            unknown.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
            known.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_size_str("4096"), Ok(4096));
        assert_eq!(parse_size_str("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size_str("1M"), Ok(1 << 20));
        assert_eq!(parse_size_str("2 GiB"), Ok(2 << 30));
        assert!(parse_size_str("1X").is_err());
        assert!(parse_size_str("").is_err());
        assert!(parse_size_str("99999999999T").is_err());
    }

    #[test]
    fn config_round_trips_and_rejects_bad_versions() {
        let d = StackConfig::default_linear();
        let again = StackConfig::parse(&d.to_toml(), "x").unwrap();
        assert_eq!(d, again);
        assert!(StackConfig::parse("version = 2\n[[layer]]\ntarget='linear'\n", "f.toml")
            .unwrap_err()
            .0
            .contains("version 2"));
        assert!(StackConfig::parse("version = 1\nlayer = []\n", "f.toml")
            .unwrap_err()
            .0
            .contains("no [[layer]]"));
        assert!(StackConfig::parse("version = 1\nbogus = 3\n", "f.toml").unwrap_err().0.contains("f.toml"));
    }

    #[test]
    fn arg_reader_names_unknown_keys() {
        let t: toml::Table = toml::from_str("a = 1\nb = \"2K\"\ntypo = 3\n").unwrap();
        let mut r = ArgReader::new("layer 1 (linear)", &t);
        assert_eq!(r.u64_opt("a").unwrap(), Some(1));
        assert_eq!(r.size_opt("b").unwrap(), Some(2048));
        let e = r.finish().unwrap_err().0;
        assert!(e.contains("`typo`") && e.starts_with("layer 1 (linear)"), "{e}");
    }
}
