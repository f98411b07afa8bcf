//! Frontend: the client side of pgshard (wire protocol, authentication).

pub mod auth;
pub mod client_stream;
pub mod hba;
pub mod messages;
pub mod server;
pub mod startup_options;
pub mod tls;
