//! What every layer above shares and that knows none of them: talking to the API server
//! (watching and listing a kind).

pub mod informer;
