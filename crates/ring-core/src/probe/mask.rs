//! `FeatureMask`: features and opcodes to hide, so this kernel can pose as an older one.
//!
//! Set by `RING_FEATURES`: a kernel version (`5.11`, a profile hiding everything newer),
//! feature names to hide (`multishot_accept,pbuf_ring`, a leading `-` allowed), both mixed,
//! or `none`. Masking only hides; it never makes the kernel appear to have more.

use std::env;

use super::{opcode_bit, opcode_since, Feature, KernelVersion};

/// The environment variable read by [`FeatureMask::from_env`].
pub const ENV_VAR: &str = "RING_FEATURES";

/// Features and opcodes to hide, with a label that parses back to the same mask.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureMask {
    /// Bits of hidden [`Feature`]s, by `1 << (f as u32)`.
    pub(super) features: u64,
    /// Bit `n` set when opcode `n` is hidden.
    pub(super) opcodes: u128,
    /// The canonical `RING_FEATURES` spelling, e.g. `5.11,-send_zc`; empty for no mask.
    label: String,
}

impl FeatureMask {
    /// Parses a `RING_FEATURES` value: `5.11`, `multishot_accept,pbuf_ring`,
    /// `-multishot_accept`, a mix of these separated by commas, or `none`/`""` (no mask).
    /// Unknown names are an error naming the valid ones.
    pub fn parse(s: &str) -> Result<FeatureMask, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("none") {
            return Ok(FeatureMask::default());
        }
        let mut tokens = s.split(',').map(str::trim).filter(|t| !t.is_empty());
        tokens.try_fold(FeatureMask::default(), |mask, token| {
            Ok(mask.union(&FeatureMask::parse_token(token)?))
        })
    }

    fn parse_token(token: &str) -> Result<FeatureMask, String> {
        if token.starts_with(|c: char| c.is_ascii_digit()) {
            return Ok(FeatureMask::profile(token.parse()?));
        }
        let name = token.strip_prefix('-').unwrap_or(token);
        match Feature::from_name(name) {
            Some(f) => Ok(FeatureMask::default().hide(f)),
            None => Err(format!(
                "unknown feature {name:?} in {ENV_VAR}; use a kernel version like 5.11, \
                 \"none\", or a comma-separated list of: {}",
                Feature::names()
            )),
        }
    }

    /// Hides every feature and opcode newer than kernel `v` (and opcodes this table does not
    /// know, which are newer than all of it).
    pub fn profile(v: KernelVersion) -> FeatureMask {
        let features = Feature::ALL
            .iter()
            .filter(|f| f.since() > v)
            .fold(0, |bits, f| bits | f.bit());
        let opcodes = (0..=u8::MAX)
            .filter(|&op| opcode_since(op).is_none_or(|since| since > v))
            .fold(0, |bits, op| bits | opcode_bit(op));
        FeatureMask {
            features,
            opcodes,
            label: v.to_string(),
        }
    }

    /// Reads `RING_FEATURES`: absent or empty is `Ok(None)`, else [`FeatureMask::parse`].
    pub fn from_env() -> Result<Option<FeatureMask>, String> {
        match env::var(ENV_VAR) {
            Err(env::VarError::NotPresent) => Ok(None),
            Err(env::VarError::NotUnicode(_)) => Err(format!("{ENV_VAR} is not valid UTF-8")),
            Ok(s) if s.trim().is_empty() => Ok(None),
            Ok(s) => FeatureMask::parse(&s).map(Some),
        }
    }

    /// This mask, also hiding `f`.
    pub fn hide(mut self, f: Feature) -> FeatureMask {
        if self.features & f.bit() == 0 {
            self.features |= f.bit();
            self.push_label(&format!("-{}", f.name()));
        }
        self
    }

    /// True when the mask hides `f`.
    pub fn is_hidden(&self, f: Feature) -> bool {
        self.features & f.bit() != 0
    }

    /// True when the mask hides nothing.
    pub fn is_empty(&self) -> bool {
        self.features == 0 && self.opcodes == 0
    }

    /// The canonical `RING_FEATURES` spelling of this mask (`none` for no mask).
    pub fn label(&self) -> &str {
        if self.label.is_empty() {
            "none"
        } else {
            &self.label
        }
    }

    fn union(mut self, other: &FeatureMask) -> FeatureMask {
        self.features |= other.features;
        self.opcodes |= other.opcodes;
        self.push_label(&other.label);
        self
    }

    fn push_label(&mut self, part: &str) {
        if !self.label.is_empty() && !part.is_empty() {
            self.label.push(',');
        }
        self.label.push_str(part);
    }
}
