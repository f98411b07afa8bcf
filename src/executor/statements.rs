//! Backend prepared statements shared by all sessions: a statement text (with its
//! parameter types) gets one id, prepared lazily as `pgs_<id>` on each backend
//! connection the first time that connection runs it. Different clients preparing
//! the same text share it, so a pooled connection prepares it once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Most statements kept prepared on one backend connection before it is reset.
pub const MAX_PREPARED_PER_CONNECTION: usize = 2000;

#[derive(Default)]
pub struct StatementRegistry {
    next: AtomicU64,
    ids: Mutex<HashMap<(String, Vec<u32>, u64), u64>>,
}

impl StatementRegistry {
    /// The id of `sql` with parameter `types` prepared for catalog version
    /// `generation` (0 for statements no DDL can change, such as BEGIN).
    pub fn id(&self, sql: &str, types: &[u32], generation: u64) -> u64 {
        let mut ids = self.ids.lock().unwrap();
        let key = (sql.to_string(), types.to_vec(), generation);
        if let Some(id) = ids.get(&key) {
            return *id;
        }
        if ids.len() > 100_000 {
            // Bounded: old ids stay valid where prepared; new texts get new ids.
            ids.clear();
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        ids.insert(key, id);
        id
    }
}

pub fn backend_name(id: u64) -> String {
    format!("pgs_{id}")
}

/// Whether `name` has the form of pgshard's own backend statement names: a client
/// must not drop those (other sessions use them on pooled connections).
pub fn is_backend_name(name: &str) -> bool {
    name.strip_prefix("pgs_")
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn backend_names_are_recognised() {
        assert!(super::is_backend_name(&super::backend_name(17)));
        for other in ["pgs_", "pgs_1x", "s1", "PGS_1", "pgs_-1"] {
            assert!(!super::is_backend_name(other), "{other}");
        }
    }

    use super::*;

    #[test]
    fn same_text_and_types_share_an_id() {
        let r = StatementRegistry::default();
        let a = r.id("select $1", &[23], 1);
        assert_eq!(a, r.id("select $1", &[23], 1));
        assert_ne!(a, r.id("select $1", &[20], 1));
        assert_ne!(a, r.id("select $2", &[23], 1));
        assert_ne!(a, r.id("select $1", &[23], 2));
        assert_eq!(backend_name(7), "pgs_7");
    }
}
