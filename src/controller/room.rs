//! When a table of the controller that a burst filled is worth cutting down once drained: the
//! controller's per-CSR table and the work queue's order.

/// The room a table of the controller keeps however little it holds.
pub(super) const KEPT_ROOM: usize = 1024;

/// True when a table of `capacity` holding `len` is worth cutting down: at most a quarter full,
/// and larger than [`KEPT_ROOM`].
pub(super) fn sparse(len: usize, capacity: usize) -> bool {
    capacity > KEPT_ROOM && len.saturating_mul(4) < capacity
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_cut_only_when_larger_than_the_kept_room_and_at_most_a_quarter_full() {
        assert!(!sparse(0, KEPT_ROOM), "the kept room itself");
        assert!(!sparse(KEPT_ROOM / 4 + 1, KEPT_ROOM + 1), "more than a quarter full");
        assert!(sparse(KEPT_ROOM / 4, KEPT_ROOM * 2));
        assert!(sparse(0, KEPT_ROOM + 1));
    }
}
