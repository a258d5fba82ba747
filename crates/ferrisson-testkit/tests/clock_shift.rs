//! `ClockShift` moves the wall clock of the processes started with it, at run time.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrisson_testkit::{ClockShift, RedisServer};

const HOUR: Duration = Duration::from_secs(3600);

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// `TIME` of a server: seconds since the epoch.
fn server_time(server: &RedisServer) -> i64 {
    // The kit's one-line reader returns the first element's header of the array reply;
    // `EVAL` turns the array into one integer instead.
    let reply = server
        .command(&["EVAL", "return redis.call('TIME')[1]", "0"])
        .expect("TIME");
    reply.trim_start_matches('$').parse().unwrap_or_else(|_| {
        panic!("TIME answered {reply:?}");
    })
}

#[test]
fn a_child_process_sees_the_shifted_wall_clock_and_follows_each_step() {
    let clock = ClockShift::new().expect("clock");
    let date = || -> i64 {
        let output = Command::new("date")
            .arg("+%s")
            .envs(clock.env())
            .output()
            .expect("date");
        String::from_utf8(output.stdout)
            .expect("utf-8")
            .trim()
            .parse()
            .expect("seconds")
    };
    assert!((date() - unix_now()).abs() <= 2, "no offset yet");
    clock.set_ahead(HOUR).expect("ahead");
    assert!((date() - unix_now() - 3600).abs() <= 2);
    clock.set_behind(2 * HOUR).expect("behind");
    assert!((date() - unix_now() + 7200).abs() <= 2);
    clock.reset().expect("reset");
    assert!((date() - unix_now()).abs() <= 2);
}

#[test]
fn a_server_clock_step_forward_expires_keys_and_a_step_back_stretches_them() {
    let clock = ClockShift::new().expect("clock");
    let server = RedisServer::start_with_clock(&clock, &[]).expect("redis-server");
    assert!((server_time(&server) - unix_now()).abs() <= 2);

    server
        .command(&["SET", "short", "v", "PX", "60000"])
        .expect("SET");
    clock.set_ahead(HOUR).expect("ahead");
    assert!((server_time(&server) - unix_now() - 3600).abs() <= 2);
    assert_eq!(
        server.command(&["EXISTS", "short"]).expect("EXISTS"),
        ":0",
        "a 60 s key is gone an hour later by the server's clock"
    );

    server
        .command(&["SET", "long", "v", "PX", "60000"])
        .expect("SET");
    clock.reset().expect("back");
    let pttl: i64 = server
        .command(&["PTTL", "long"])
        .expect("PTTL")
        .trim_start_matches(':')
        .parse()
        .expect("integer");
    assert!(
        pttl > 3_600_000,
        "a step back by an hour stretches a 60 s TTL to {pttl} ms"
    );
}

#[test]
fn a_restarted_server_stays_on_the_shifted_clock() {
    let clock = ClockShift::new().expect("clock");
    clock.set_ahead(HOUR).expect("ahead");
    let mut server = RedisServer::start_with_clock(&clock, &[]).expect("redis-server");
    server.restart().expect("restart");
    assert!((server_time(&server) - unix_now() - 3600).abs() <= 2);
}

#[test]
fn an_offset_too_large_is_refused() {
    let clock = ClockShift::new().expect("clock");
    let error = clock
        .set_ahead(Duration::from_secs(u64::MAX))
        .expect_err("too large");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}
