//! The scheduler's leader election is the crate's [`crate::infra::leader_election`], shared with the
//! operator.

pub(crate) use crate::infra::leader_election::*;
