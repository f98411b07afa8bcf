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
    ids: Mutex<HashMap<(String, Vec<u32>), u64>>,
}

impl StatementRegistry {
    pub fn id(&self, sql: &str, types: &[u32]) -> u64 {
        let mut ids = self.ids.lock().unwrap();
        if let Some(id) = ids.get(&(sql.to_string(), types.to_vec())) {
            return *id;
        }
        if ids.len() > 100_000 {
            // Bounded: old ids stay valid where prepared; new texts get new ids.
            ids.clear();
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        ids.insert((sql.to_string(), types.to_vec()), id);
        id
    }
}

pub fn backend_name(id: u64) -> String {
    format!("pgs_{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_and_types_share_an_id() {
        let r = StatementRegistry::default();
        let a = r.id("select $1", &[23]);
        assert_eq!(a, r.id("select $1", &[23]));
        assert_ne!(a, r.id("select $1", &[20]));
        assert_ne!(a, r.id("select $2", &[23]));
        assert_eq!(backend_name(7), "pgs_7");
    }
}
