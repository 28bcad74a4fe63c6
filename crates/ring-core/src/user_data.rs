//! `user_data` encoding: an op-table index plus a generation, and the reserved values.
//!
//! The generation makes a CQE for a slot that was since freed and reused detectable
//! (a "stale" CQE) instead of being delivered to the wrong op.

/// Index value no op-table slot ever has: marks the reserved `user_data` values.
const RESERVED_INDEX: u32 = u32::MAX;

/// Identity of one op in the op table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId {
    /// Slot in the op table.
    pub index: u32,
    /// Generation the slot had when this op was inserted.
    pub generation: u32,
}

/// `user_data` values that belong to the driver itself, not to an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Reserved {
    /// An `ASYNC_CANCEL` SQE: its own CQE carries nothing we need.
    Cancel = 1,
    /// The wait timeout used on kernels without `EXT_ARG`.
    Timeout = 2,
    /// A wake-up: an eventfd read or a `MSG_RING` from another thread.
    Wake = 3,
    /// A fire-and-forget op (e.g. a close whose result nobody waits for).
    Ignore = 4,
}

/// Tags from this one up to [`OWN_BASE`] carry a legacy `PROVIDE_BUFFERS` SQE of the
/// driver's (see `driver/groups.rs`): the tag minus this base is the number under which the
/// driver keeps its run of buffers until the CQE comes.
const PROVIDE_BASE: u32 = 1 << 29;

/// The largest number a provide's `user_data` carries.
pub(crate) const PROVIDE_MAX: u32 = PROVIDE_BASE - 1;

/// The `user_data` of the driver's provide number `key` (at most [`PROVIDE_MAX`]).
pub(crate) fn provide_user_data(key: u32) -> u64 {
    debug_assert!(key <= PROVIDE_MAX);
    tagged(PROVIDE_BASE | (key & PROVIDE_MAX))
}

/// The `user_data` of a value the driver keeps for itself: `tag` in the high half, the
/// index no op-table slot has in the low half.
fn tagged(tag: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(RESERVED_INDEX)
}

/// Tags from this one up to [`ARRIVAL_BASE`] carry an op the driver waits for itself
/// (`Driver::install_direct`): the tag minus this base is the wait's own number, so a CQE
/// that comes after its wait gave up is never taken for a later wait's.
const OWN_BASE: u32 = 1 << 30;

/// The largest number an own op's `user_data` carries.
pub(crate) const OWN_SEQ_MAX: u32 = OWN_BASE - 1;

/// The `user_data` of the driver's own op number `seq` (taken modulo
/// [`OWN_SEQ_MAX`] + 1).
pub(crate) fn own_user_data(seq: u32) -> u64 {
    tagged(OWN_BASE | (seq & OWN_SEQ_MAX))
}

/// Tags at and above this one carry a direct descriptor sent by another ring
/// (`MSG_RING`'s `SEND_FD`): the tag minus this base is the sender's sequence number.
const ARRIVAL_BASE: u32 = 1 << 31;

/// The largest sequence number an arrival's `user_data` carries.
pub const ARRIVAL_SEQ_MAX: u32 = ARRIVAL_BASE - 1;

/// The `user_data` of the CQE that a direct descriptor sent with sequence number `seq`
/// posts in the receiving ring (`seq` is taken modulo [`ARRIVAL_SEQ_MAX`] + 1).
pub fn arrival_user_data(seq: u32) -> u64 {
    tagged(ARRIVAL_BASE | (seq & ARRIVAL_SEQ_MAX))
}

/// What a `user_data` value means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserData {
    /// A CQE for an op in the op table.
    Op(OpId),
    /// A CQE for the driver's own SQEs.
    Reserved(Reserved),
    /// A direct descriptor another ring sent, with the sender's sequence number.
    Arrival(u32),
    /// An op the driver waits for itself, with its number.
    Own(u32),
    /// A legacy `PROVIDE_BUFFERS` of the driver's, with its number.
    Provide(u32),
    /// A value ring-core never produced.
    Unknown(u64),
}

impl OpId {
    /// Packs into `user_data`: generation in the high half, index in the low half.
    pub fn to_user_data(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }
}

impl Reserved {
    /// The `user_data` value for this reserved kind.
    pub fn to_user_data(self) -> u64 {
        tagged(self as u32)
    }

    fn from_tag(tag: u32) -> Option<Reserved> {
        match tag {
            1 => Some(Reserved::Cancel),
            2 => Some(Reserved::Timeout),
            3 => Some(Reserved::Wake),
            4 => Some(Reserved::Ignore),
            _ => None,
        }
    }
}

/// Largest op-table index; the one above it marks reserved values.
pub const INDEX_MAX: u32 = RESERVED_INDEX - 1;

/// Decodes a `user_data` value from a CQE.
pub fn decode(user_data: u64) -> UserData {
    let index = user_data as u32;
    let high = (user_data >> 32) as u32;
    if index != RESERVED_INDEX {
        return UserData::Op(OpId {
            index,
            generation: high,
        });
    }
    if high >= ARRIVAL_BASE {
        return UserData::Arrival(high - ARRIVAL_BASE);
    }
    if high >= OWN_BASE {
        return UserData::Own(high - OWN_BASE);
    }
    if high >= PROVIDE_BASE {
        return UserData::Provide(high - PROVIDE_BASE);
    }
    match Reserved::from_tag(high) {
        Some(reserved) => UserData::Reserved(reserved),
        None => UserData::Unknown(user_data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_id_round_trips() {
        let id = OpId {
            index: 42,
            generation: 0xdead_beef,
        };
        assert_eq!(decode(id.to_user_data()), UserData::Op(id));
    }

    #[test]
    fn reserved_values_round_trip_and_never_look_like_ops() {
        for r in [
            Reserved::Cancel,
            Reserved::Timeout,
            Reserved::Wake,
            Reserved::Ignore,
        ] {
            assert_eq!(decode(r.to_user_data()), UserData::Reserved(r));
        }
    }

    #[test]
    fn arrivals_round_trip_their_sequence_number() {
        for seq in [0, 1, 12_345, ARRIVAL_SEQ_MAX] {
            assert_eq!(decode(arrival_user_data(seq)), UserData::Arrival(seq));
        }
        // Past the largest, numbers wrap rather than turning into another tag.
        assert_eq!(
            decode(arrival_user_data(ARRIVAL_SEQ_MAX.wrapping_add(2))),
            UserData::Arrival(1)
        );
    }

    #[test]
    fn own_ops_round_trip_their_number_and_never_look_like_arrivals() {
        for seq in [0, 1, OWN_SEQ_MAX] {
            assert_eq!(decode(own_user_data(seq)), UserData::Own(seq));
        }
        assert_eq!(decode(own_user_data(OWN_SEQ_MAX + 3)), UserData::Own(2));
    }

    #[test]
    fn provides_round_trip_their_number_and_never_look_like_own_ops() {
        for key in [0, 1, 4_096, PROVIDE_MAX] {
            assert_eq!(decode(provide_user_data(key)), UserData::Provide(key));
        }
        assert_eq!(decode(own_user_data(0)), UserData::Own(0));
        assert_eq!(
            decode(Reserved::Ignore.to_user_data()),
            UserData::Reserved(Reserved::Ignore)
        );
    }

    #[test]
    fn unknown_reserved_tag_is_unknown() {
        let raw = (99u64 << 32) | u64::from(u32::MAX);
        assert_eq!(decode(raw), UserData::Unknown(raw));
    }
}
