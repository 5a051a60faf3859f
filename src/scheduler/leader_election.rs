//! The scheduler's leader election is the crate's [`crate::leader_election`], shared with the
//! operator.

pub(crate) use crate::leader_election::*;
