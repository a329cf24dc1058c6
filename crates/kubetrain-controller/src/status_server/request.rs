//! The request body of the status endpoint: parsing as upstream's Go server, the CRD's rules, the status
//! merge patch and the answers. It lives in [`kubetrain_api::status_update`] (pure), so that the local
//! runner's loopback endpoint answers exactly as this server; re-exported here.

pub use kubetrain_api::status_update::*;
