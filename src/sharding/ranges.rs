//! The int32 hash space cut into `shard_count` equal ranges, and the lookup of the
//! range holding a hash value, exactly as Citus computes them.

/// Bounds of shard `index` (0-based) out of `shard_count`: `[min, max]` inclusive.
/// `inc = 2^32 / shard_count`; the last shard absorbs the remainder up to `i32::MAX`.
pub fn shard_range(index: u32, shard_count: u32) -> (i32, i32) {
    assert!(shard_count > 0 && index < shard_count);
    let inc = (1u64 << 32) / shard_count as u64;
    let min = i32::MIN as i64 + index as i64 * inc as i64;
    let max = if index == shard_count - 1 {
        i32::MAX as i64
    } else {
        min + inc as i64 - 1
    };
    (min as i32, max as i32)
}

/// All ranges of a table with `shard_count` shards, in order.
pub fn all_ranges(shard_count: u32) -> Vec<(i32, i32)> {
    (0..shard_count)
        .map(|i| shard_range(i, shard_count))
        .collect()
}

/// Index of the shard holding `hash` among `shard_count` uniform ranges.
pub fn uniform_index(hash: i32, shard_count: u32) -> u32 {
    let inc = (1u64 << 32) / shard_count as u64;
    let index = ((hash as i64 - i32::MIN as i64) as u64 / inc) as u32;
    index.min(shard_count - 1)
}

/// Finds the shard of a hash: by arithmetic when the table's ranges are the uniform
/// ones (the normal case), by binary search over the stored bounds otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardIndexer {
    Uniform { shard_count: u32 },
    Search,
}

/// Anything with inclusive hash bounds (a catalog shard interval).
pub trait HashBounds {
    fn bounds(&self) -> (i32, i32);
}

impl HashBounds for crate::catalog::ShardInterval {
    fn bounds(&self) -> (i32, i32) {
        (self.min, self.max)
    }
}

impl ShardIndexer {
    /// Chooses the indexer for intervals sorted by min.
    pub fn for_intervals<T: HashBounds>(sorted: &[T]) -> ShardIndexer {
        let n = sorted.len() as u32;
        if n > 0
            && sorted
                .iter()
                .enumerate()
                .all(|(i, s)| s.bounds() == shard_range(i as u32, n))
        {
            ShardIndexer::Uniform { shard_count: n }
        } else {
            ShardIndexer::Search
        }
    }

    pub fn find<'a, T: HashBounds>(&self, sorted: &'a [T], hash: i32) -> Option<&'a T> {
        match *self {
            ShardIndexer::Uniform { shard_count } => {
                sorted.get(uniform_index(hash, shard_count) as usize)
            }
            ShardIndexer::Search => {
                let pos = sorted.partition_point(|s| s.bounds().1 < hash);
                sorted.get(pos).filter(|s| s.bounds().0 <= hash)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct B(i32, i32);
    impl HashBounds for B {
        fn bounds(&self) -> (i32, i32) {
            (self.0, self.1)
        }
    }

    #[test]
    fn ranges_cover_int32_without_gaps() {
        for n in [1u32, 2, 3, 7, 8, 32, 100, 128] {
            let r = all_ranges(n);
            assert_eq!(r[0].0, i32::MIN);
            assert_eq!(r.last().unwrap().1, i32::MAX);
            for w in r.windows(2) {
                assert_eq!(w[0].1 as i64 + 1, w[1].0 as i64);
            }
        }
    }

    #[test]
    fn citus_bounds_for_32_shards() {
        // Citus: shard 0 of 32 is [-2147483648, -2013265921], shard 31 ends at 2147483647.
        assert_eq!(shard_range(0, 32), (-2147483648, -2013265921));
        assert_eq!(shard_range(16, 32), (0, 134217727));
        assert_eq!(shard_range(31, 32), (2013265920, 2147483647));
        // Non power of two: last shard absorbs the remainder.
        assert_eq!(
            shard_range(2, 3),
            ((-2147483648i64 + 2 * 1431655765) as i32, 2147483647)
        );
    }

    #[test]
    fn uniform_lookup_matches_search() {
        for n in [1u32, 3, 32, 100] {
            let shards: Vec<B> = all_ranges(n).into_iter().map(|(a, b)| B(a, b)).collect();
            assert_eq!(
                ShardIndexer::for_intervals(&shards),
                ShardIndexer::Uniform { shard_count: n }
            );
            for h in [
                i32::MIN,
                -1,
                0,
                1,
                12345,
                i32::MAX,
                -2013265921,
                -2013265920,
            ] {
                let u = ShardIndexer::Uniform { shard_count: n }
                    .find(&shards, h)
                    .unwrap();
                let s = ShardIndexer::Search.find(&shards, h).unwrap();
                assert_eq!(u.bounds(), s.bounds());
                assert!(u.0 <= h && h <= u.1);
            }
        }
    }
}
