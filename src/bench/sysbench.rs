//! Reading what sysbench 1.0 prints after `run` (W3, oltp_insert): transactions and
//! their rate, ignored errors, average and 95th-percentile latency, and the latency
//! histogram (`--histogram=on`), from which the median (and 99th percentile) come.

/// sysbench's summary of one run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub transactions: Option<u64>,
    pub tps: Option<f64>,
    pub ignored_errors: Option<u64>,
    pub latency_avg_ms: Option<f64>,
    pub latency_p95_ms: Option<f64>,
    /// (upper bound ms, count) of every non-empty histogram bucket, in order.
    pub histogram: Vec<(f64, u64)>,
}

impl Summary {
    /// The nearest-rank percentile `p` of the histogram (the bucket's value, ms).
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let total: u64 = self.histogram.iter().map(|(_, n)| n).sum();
        if total == 0 {
            return None;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for &(v, n) in &self.histogram {
            seen += n;
            if seen >= rank {
                return Some(v);
            }
        }
        self.histogram.last().map(|(v, _)| *v)
    }

    pub fn samples(&self) -> u64 {
        self.histogram.iter().map(|(_, n)| n).sum()
    }
}

/// Reads sysbench 1.0's output of `run`.
pub fn parse(stdout: &str) -> Summary {
    let mut s = Summary::default();
    let first_number = |text: &str| -> Option<f64> {
        text.split_whitespace()
            .next()?
            .trim_end_matches('s')
            .parse()
            .ok()
    };
    // "(8311.79 per sec.)"
    let rate = |text: &str| -> Option<f64> {
        let inner = text.split_once('(')?.1;
        inner.split_whitespace().next()?.parse().ok()
    };
    for line in stdout.lines() {
        let t = line.trim();
        if let Some((value, rest)) = t.split_once('|') {
            // Histogram: "   5.090 |*****      6"
            if let (Ok(v), Some(n)) = (
                value.trim().parse::<f64>(),
                rest.split_whitespace()
                    .last()
                    .and_then(|n| n.parse::<u64>().ok()),
            ) {
                if n > 0 {
                    s.histogram.push((v, n));
                }
            }
            continue;
        }
        if let Some(v) = t.strip_prefix("transactions:") {
            s.transactions = first_number(v).map(|n| n as u64);
            s.tps = rate(v);
        } else if let Some(v) = t.strip_prefix("ignored errors:") {
            s.ignored_errors = first_number(v).map(|n| n as u64);
        } else if let Some(v) = t.strip_prefix("avg:") {
            // Only the "Latency (ms):" block has an "avg:" line.
            s.latency_avg_ms = first_number(v);
        } else if let Some(v) = t.strip_prefix("95th percentile:") {
            s.latency_p95_ms = first_number(v);
        }
    }
    s
}

/// Why a sysbench run failed, in its words: its first FATAL line.
pub fn fatal_line(stdout: &str, stderr: &str) -> Option<String> {
    stdout
        .lines()
        .chain(stderr.lines())
        .find(|l| l.contains("FATAL"))
        .map(|l| l.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 4

Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       0.120 |**                                       10
       0.250 |****************************************  80
       1.000 |****                                     9
      60.000 |                                         1
 
SQL statistics:
    queries performed:
        read:                            0
        write:                           24957
        other:                           0
        total:                           24957
    transactions:                        24957  (8311.79 per sec.)
    queries:                             24957  (8311.79 per sec.)
    ignored errors:                      0      (0.00 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          3.0022s
    total number of events:              24957

Latency (ms):
         min:                                    0.12
         avg:                                    0.48
         max:                                   60.72
         95th percentile:                        1.06
         sum:                                11949.45
";

    #[test]
    fn parses_the_summary_and_histogram() {
        let s = parse(OUT);
        assert_eq!(s.transactions, Some(24957));
        assert_eq!(s.tps, Some(8311.79));
        assert_eq!(s.ignored_errors, Some(0));
        assert_eq!(s.latency_avg_ms, Some(0.48));
        assert_eq!(s.latency_p95_ms, Some(1.06));
        assert_eq!(s.histogram.len(), 4);
        assert_eq!(s.samples(), 100);
        assert_eq!(s.percentile(50.0), Some(0.25));
        assert_eq!(s.percentile(10.0), Some(0.12));
        assert_eq!(s.percentile(99.0), Some(1.0));
        assert_eq!(s.percentile(100.0), Some(60.0));
        assert_eq!(Summary::default().percentile(50.0), None);
    }

    #[test]
    fn fatal() {
        assert_eq!(
            fatal_line("x\nFATAL: PQexec() failed: 7 ERROR:  boom\n", ""),
            Some("FATAL: PQexec() failed: 7 ERROR:  boom".into())
        );
        assert_eq!(fatal_line("fine", ""), None);
    }
}
