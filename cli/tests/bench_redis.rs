//! `brownout bench redis` runs against a Redis of its own (redis-server on a loopback port)
//! and reports every row it promises.

use std::process::Command;

#[test]
fn bench_redis_measures_against_its_own_redis() {
    let out = Command::new(env!("CARGO_BIN_EXE_brownout"))
        .args([
            "bench",
            "redis",
            "--decisions",
            "2000",
            "--concurrency",
            "1,8",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for row in ["| 1 | ", "| 8 | ", "Redis down, breaker open"] {
        assert!(text.contains(row), "{row} missing from:\n{text}");
    }
}
