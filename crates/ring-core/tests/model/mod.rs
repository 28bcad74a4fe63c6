//! Model checkers for ring-core's pure parts, driven by a byte string: each byte decides the
//! next step of a schedule. The same checkers run under proptest and Miri
//! (`tests/reliability_model.rs`) and under libFuzzer (`fuzz/fuzz_targets/`). A broken
//! invariant panics with the step that broke it.

#![allow(dead_code)]

pub mod buf_index;
pub mod op_lifecycle;

/// Reads a schedule's bytes; past the end every read is 0, so any input is a whole schedule.
pub struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, at: 0 }
    }

    /// True once every byte was read.
    pub fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// An index below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.u16()) % n
    }
}
