//! W2 (multi-shard write fan-out): choosing the ids of the 9-row INSERT so that its rows
//! land on exactly 9, 2 or 1 shards of the distributed table `w2`, and the pgbench
//! scripts that insert them.
//!
//! Citus hashes an int4 distribution value with PostgreSQL's `hashint4` and puts it in the
//! shard whose [shardminvalue, shardmaxvalue] holds the hash; the ranges are read from
//! `pg_dist_shard` after `create_distributed_table`, so the choice follows the real
//! placement. The table has no primary key (workloads.md's `test` has none either), so
//! every transaction may insert the same ids: the shards a statement touches stay fixed.

use crate::sharding::hash::hash_int4;

/// Where the rows of one W2 statement land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// 9 consecutive ids, each on a different shard (as in the article).
    NineShards,
    /// 9 ids over exactly 2 shards.
    TwoShards,
    /// 9 ids, all on one shard.
    OneShard,
    /// 1 id.
    OneRow,
}

/// The index in `ranges` of the shard holding `id`.
pub fn shard_of(ranges: &[(i32, i32)], id: i32) -> Option<usize> {
    let h = hash_int4(id);
    ranges.iter().position(|&(lo, hi)| lo <= h && h <= hi)
}

/// Ids (from 1 on, small) whose rows land as `spread` says; None if the table has too
/// few shards for it (NineShards needs 9, TwoShards 2).
pub fn choose_ids(ranges: &[(i32, i32)], spread: Spread) -> Option<Vec<i32>> {
    const SEARCH: i32 = 1_000_000;
    match spread {
        Spread::OneRow => Some(vec![1]),
        Spread::NineShards => (1..SEARCH).find_map(|base| {
            let ids: Vec<i32> = (base..base + 9).collect();
            let mut shards: Vec<usize> = ids
                .iter()
                .map(|&id| shard_of(ranges, id))
                .collect::<Option<_>>()?;
            shards.sort_unstable();
            shards.dedup();
            (shards.len() == 9).then_some(ids)
        }),
        Spread::TwoShards | Spread::OneShard => {
            let want = if spread == Spread::TwoShards { 2 } else { 1 };
            // The first `want` shards met, then ids taken from them in turn.
            let mut per_shard: Vec<(usize, Vec<i32>)> = Vec::new();
            for id in 1..SEARCH {
                let s = shard_of(ranges, id)?;
                if let Some((_, ids)) = per_shard.iter_mut().find(|(x, _)| *x == s) {
                    ids.push(id);
                } else if per_shard.len() < want {
                    per_shard.push((s, vec![id]));
                }
                if per_shard.len() == want && per_shard.iter().all(|(_, ids)| ids.len() >= 9) {
                    break;
                }
            }
            if per_shard.len() < want {
                return None;
            }
            let mut ids = Vec::new();
            for i in 0..9 {
                let (_, from) = &per_shard[i % want];
                ids.push(*from.get(i / want)?);
            }
            ids.sort_unstable();
            Some(ids)
        }
    }
}

/// The number of distinct shards `ids` land on.
pub fn shards_touched(ranges: &[(i32, i32)], ids: &[i32]) -> usize {
    let mut s: Vec<Option<usize>> = ids.iter().map(|&id| shard_of(ranges, id)).collect();
    s.sort_unstable();
    s.dedup();
    s.len()
}

/// The statements of one W2 transaction (autocommit): the commit protocol, when the
/// variant sets one, then the INSERT.
pub fn statements(ids: &[i32], protocol: Option<&str>) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(p) = protocol {
        v.push(format!("SET citus.multi_shard_commit_protocol = '{p}'"));
    }
    let values: Vec<String> = ids.iter().map(|id| format!("({id})")).collect();
    v.push(format!("insert into w2 values {}", values.join(",")));
    v
}

/// The uniform hash ranges Citus gives `n` shards (as `create_distributed_table` does).
#[cfg(test)]
fn uniform_ranges(n: u32) -> Vec<(i32, i32)> {
    let step = (1u64 << 32) / n as u64;
    (0..n as u64)
        .map(|i| {
            let lo = (i32::MIN as i64 + (i * step) as i64) as i32;
            let hi = if i + 1 == n as u64 {
                i32::MAX
            } else {
                (i32::MIN as i64 + ((i + 1) * step) as i64 - 1) as i32
            };
            (lo, hi)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_land_on_the_wanted_number_of_shards() {
        for n in [9, 16, 32, 128] {
            let r = uniform_ranges(n);
            let nine = choose_ids(&r, Spread::NineShards).unwrap();
            assert_eq!(nine.len(), 9);
            assert_eq!(nine.windows(2).filter(|w| w[1] != w[0] + 1).count(), 0);
            assert_eq!(shards_touched(&r, &nine), 9, "{n} shards: {nine:?}");
            let two = choose_ids(&r, Spread::TwoShards).unwrap();
            assert_eq!((two.len(), shards_touched(&r, &two)), (9, 2), "{two:?}");
            let one = choose_ids(&r, Spread::OneShard).unwrap();
            assert_eq!((one.len(), shards_touched(&r, &one)), (9, 1), "{one:?}");
            assert_eq!(choose_ids(&r, Spread::OneRow), Some(vec![1]));
        }
    }

    #[test]
    fn too_few_shards() {
        assert_eq!(choose_ids(&uniform_ranges(4), Spread::NineShards), None);
        assert_eq!(choose_ids(&uniform_ranges(1), Spread::TwoShards), None);
        assert!(choose_ids(&uniform_ranges(1), Spread::OneShard).is_some());
    }

    #[test]
    fn the_statements() {
        assert_eq!(
            statements(&[3, 4], Some("1pc")),
            [
                "SET citus.multi_shard_commit_protocol = '1pc'",
                "insert into w2 values (3),(4)"
            ]
        );
        assert_eq!(statements(&[1], None), ["insert into w2 values (1)"]);
    }
}
