//! Files (in progress).
