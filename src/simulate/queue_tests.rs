//! Tests of `simulate/queue.rs`.

use super::*;

const DT: f64 = 0.01;

/// Runs `seconds` of a constant admitted load (all one tier); returns the ticks.
fn run(server: &mut Server, rate: f64, seconds: f64, deadline: Option<ClientDeadline>) -> Tick {
    let mut sum = Tick::default();
    let steps = (seconds / DT).round() as u64;
    for i in 0..steps {
        let t = server.tick(
            i as f64 * DT,
            DT,
            [0.0, 0.0, rate * DT, 0.0],
            1.0,
            deadline,
            &mut |_, _, _| {},
        );
        sum.succeeded[2] += t.succeeded[2];
        sum.timed_out[2] += t.timed_out[2];
    }
    sum
}

#[test]
fn under_capacity_everything_is_served_and_in_flight_follows_littles_law() {
    // 8 workers × 50 ms = 160/s; at 80/s, 80 × 0.05 = 4 in flight.
    let mut s = Server::new(8, 0.05);
    let t = run(&mut s, 80.0, 20.0, None);
    assert!((t.succeeded[2] - 1600.0).abs() < 1e-6, "{t:?}");
    assert!((s.in_flight() - 4.0).abs() < 0.2, "{}", s.in_flight());
}

#[test]
fn over_capacity_the_queue_grows_by_the_excess_and_clients_give_up() {
    let mut s = Server::new(8, 0.05);
    let t = run(&mut s, 320.0, 10.0, None);
    // Served at the capacity, 160/s; the other 160/s wait.
    assert!((t.succeeded[2] - 1600.0).abs() < 20.0, "{t:?}");
    assert!((s.in_flight() - 1600.0).abs() < 20.0, "{}", s.in_flight());

    let mut s = Server::new(8, 0.05);
    let deadline = ClientDeadline {
        seconds: 1.0,
        keep_abandoned: false,
    };
    let t = run(&mut s, 320.0, 10.0, Some(deadline));
    // At most about a second of backlog is kept; the rest is dropped as timed out.
    assert!(s.in_flight() < 320.0 + 8.0, "{}", s.in_flight());
    assert!(t.timed_out[2] > 1300.0, "{t:?}");
}

#[test]
fn kept_abandoned_work_still_occupies_the_workers() {
    let mut s = Server::new(8, 0.05);
    let deadline = ClientDeadline {
        seconds: 1.0,
        keep_abandoned: true,
    };
    let t = run(&mut s, 320.0, 10.0, Some(deadline));
    assert!(s.in_flight() > 1500.0, "{}", s.in_flight());
    // The wait grows by half a second a second: only what starts in the first ~1.9 s
    // (at 160/s) is in time; everything after is late.
    assert!(t.succeeded[2] < 330.0 && t.timed_out[2] > 1250.0, "{t:?}");
}
