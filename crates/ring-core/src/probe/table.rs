//! `FeatureTable`: [`Features`] as a readable table, for `cargo xtask probe` and logs.

use std::fmt;

use super::{opcode_name, opcode_since, Feature, Features, OPCODE_COUNT};
use crate::errno::errno_name;

/// Displays each feature (yes / no / masked, the kernel that added it, whether ring-rt uses
/// it) and then each opcode. Made by [`Features::table`].
pub struct FeatureTable<'a> {
    features: &'a Features,
}

impl<'a> FeatureTable<'a> {
    pub(super) fn new(features: &'a Features) -> FeatureTable<'a> {
        FeatureTable { features }
    }

    fn status(&self, f: Feature) -> String {
        let features = self.features;
        if features.has(f) {
            return "yes".to_string();
        }
        if features.is_masked(f) {
            return "masked".to_string();
        }
        match features.trial_errno(f) {
            Some(errno) => format!("no ({})", errno_name(errno)),
            None => "no".to_string(),
        }
    }

    fn opcode_status(&self, opcode: u8) -> &'static str {
        if self.features.has_opcode(opcode) {
            "yes"
        } else if self.features.is_opcode_masked(opcode) {
            "masked"
        } else {
            "no"
        }
    }

    fn header(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let features = self.features;
        let release = match features.kernel_release() {
            "" => "(not probed)",
            release => release,
        };
        write!(f, "io_uring on Linux {release}")?;
        write!(f, ", FEAT bits {:#x}", features.feat_raw())?;
        match features.mask_label() {
            Some(label) => writeln!(f, ", masked by RING_FEATURES={label}"),
            None => writeln!(f, ", unmasked"),
        }
    }

    fn feature_rows(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<18} {:<14} {:<11} ring-rt",
            "feature", "status", "since"
        )?;
        for &feature in Feature::ALL {
            let since = format!("since {}", feature.since());
            let status = self.status(feature);
            let used = if feature.is_used_by_runtime() {
                "uses"
            } else {
                ""
            };
            let row = format!("{:<18} {status:<14} {since:<11} {used}", feature.name());
            writeln!(f, "{}", row.trim_end())?;
        }
        Ok(())
    }

    fn opcode_rows(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = (0..OPCODE_COUNT).filter(|&op| self.features.has_opcode(op));
        write!(f, "opcodes: {} of {OPCODE_COUNT} known", known.count())?;
        if self.features.is_opcodes_inferred() {
            write!(
                f,
                " (inferred from the kernel version: no IORING_REGISTER_PROBE)"
            )?;
        }
        writeln!(f)?;
        for op in 0..OPCODE_COUNT {
            let status = self.opcode_status(op);
            write!(f, "{op:>3} {:<18} {status:<14}", opcode_name(op))?;
            match opcode_since(op) {
                Some(since) => writeln!(f, " since {since}")?,
                None => writeln!(f)?,
            }
        }
        let newer: Vec<String> = (OPCODE_COUNT..=127)
            .filter(|&op| self.features.has_opcode(op))
            .map(|op| op.to_string())
            .collect();
        if !newer.is_empty() {
            writeln!(
                f,
                "also supported, newer than this table: {}",
                newer.join(", ")
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for FeatureTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.header(f)?;
        self.feature_rows(f)?;
        self.opcode_rows(f)
    }
}
