//! Bad input gets a typed error, never a panic: property tests over the public entry
//! points (names, namespaces, leases and timeouts, permit and latch counts, id prefixes
//! and decoding, URLs), against one real redis-server per test. Cases that talk to the
//! server are bounded so the suite stays quick.

use std::future::Future;
use std::time::Duration;

use chrono::NaiveDate;
use ferrisson_redis::{
    Client, Error, IdGenerator, Lease, MAX_ID_PREFIX_LEN, MAX_IDS_PER_CALL, MAX_NAME_LEN,
    MAX_NAMESPACE_LEN, RedisStoreError, Redlock,
};
use ferrisson_testkit::{RedisServer, key_slot};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// A server, a runtime and a client on it, shared by the cases of one property.
struct Fixture {
    server: RedisServer,
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl Fixture {
    fn start() -> Self {
        let server = RedisServer::start().expect("redis-server");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let client = runtime
            .block_on(Client::connect(&server.url()))
            .expect("client");
        Self {
            server,
            runtime,
            client,
        }
    }

    /// Runs `property` over `cases` values of `strategy`; a panic in the library fails
    /// the case like a broken assertion (and is shrunk to a small input).
    fn check<S, F, Fut>(&self, cases: u32, strategy: S, property: F)
    where
        S: Strategy,
        F: Fn(Client, S::Value) -> Fut,
        Fut: Future<Output = Result<(), TestCaseError>>,
    {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let outcome = runner.run(&strategy, |value| {
            self.runtime.block_on(property(self.client.clone(), value))
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
    }
}

/// Names of every shape: short and long (around the 1 KiB limit), empty, any Unicode,
/// with braces anywhere.
fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        2 => "[a-z:{}]{0,12}",
        1 => Just(String::new()),
        1 => (MAX_NAME_LEN - 2..MAX_NAME_LEN + 3).prop_map(|n| "n".repeat(n)),
        1 => "\\PC{1,8}".prop_map(|s| format!("{s}}}")),
    ]
}

fn name_is_valid(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && !name.contains(['{', '}'])
}

/// Durations from zero to `Duration::MAX`, the edges of the lease rules included.
fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(999_999)),
        Just(Duration::from_millis(1)),
        Just(Duration::from_secs(365 * 24 * 3600)),
        Just(Duration::from_secs(365 * 24 * 3600) + Duration::from_nanos(1)),
        Just(Duration::MAX),
        (any::<u64>(), 0..1_000_000_000_u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..100_000_u64).prop_map(Duration::from_millis),
    ]
}

fn lease_is_valid(lease: Duration) -> bool {
    lease >= Duration::from_millis(1) && lease <= Duration::from_secs(365 * 24 * 3600)
}

fn is_invalid_argument<T>(result: &ferrisson_redis::Result<T>) -> bool {
    matches!(result, Err(Error::InvalidArgument(_)))
}

/// The hash tag Redis Cluster hashes for `key`: the text between the first `{` and the
/// next `}` when it is not empty, else the whole key.
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[test]
fn names_are_accepted_exactly_when_valid_everywhere() {
    let fixture = Fixture::start();
    fixture.check(200, names(), |client, name| async move {
        let valid = name_is_valid(&name);
        let results = [
            client.lock(&name).map(drop),
            client.simple_lock(&name).map(drop),
            client.fair_lock(&name).map(drop),
            client.rwlock(&name).map(drop),
            client.semaphore(&name).map(drop),
            client.expirable_semaphore(&name).map(drop),
            client.count_down_latch(&name).map(drop),
            Redlock::new(std::slice::from_ref(&client), &name).map(drop),
        ];
        for result in results {
            prop_assert_eq!(result.is_ok(), valid, "{:?}: {:?}", name, result);
            prop_assert!(valid || is_invalid_argument(&result), "{:?}", result);
        }
        Ok(())
    });
}

#[test]
fn a_valid_names_keys_share_one_hash_tag() {
    let fixture = Fixture::start();
    let url = fixture.server.url();
    fixture.check(
        40,
        names().prop_filter("valid", |n| name_is_valid(n)),
        move |client, name| {
            let url = url.clone();
            async move {
                let lock = client.lock(&name).map_err(fail)?;
                let guard = lock.try_lock().await.map_err(fail)?;
                prop_assert!(guard.is_some(), "{:?} is free", name);
                let mut conn = redis::Client::open(url)
                    .map_err(fail)?
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(fail)?;
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg("*")
                    .query_async(&mut conn)
                    .await
                    .map_err(fail)?;
                prop_assert_eq!(
                    keys.len(),
                    2,
                    "the lock and the server's fencing floor: {:?}",
                    keys
                );
                for key in &keys {
                    if key.starts_with("ferrisson:fence:") {
                        // On one server every name shares the floor of slot 0 (on a
                        // cluster, the name's slot has its own, or no script would run).
                        prop_assert_eq!(key_slot(key), 0, "{:?}", keys);
                    } else {
                        prop_assert_eq!(hash_tag(key), name.as_str(), "{:?}", keys);
                    }
                }
                if let Some(guard) = guard {
                    guard.unlock().await.map_err(fail)?;
                }
                let _: () = redis::cmd("FLUSHALL")
                    .query_async(&mut conn)
                    .await
                    .map_err(fail)?;
                Ok(())
            }
        },
    );
}

#[test]
fn namespaces_are_accepted_exactly_when_valid() {
    let fixture = Fixture::start();
    let url = fixture.server.url();
    let namespaces = prop_oneof![
        4 => any::<String>(),
        2 => "[a-z:{}]{0,8}",
        1 => (MAX_NAMESPACE_LEN - 1..MAX_NAMESPACE_LEN + 2).prop_map(|n| "s".repeat(n)),
    ];
    fixture.check(40, namespaces, move |_, namespace| {
        let url = url.clone();
        async move {
            let valid = namespace.len() <= MAX_NAMESPACE_LEN && !namespace.contains(['{', '}']);
            let result = Client::builder(&url)
                .namespace(namespace.clone())
                .connect()
                .await;
            prop_assert_eq!(result.is_ok(), valid, "{:?}: {:?}", namespace, result);
            prop_assert!(valid || is_invalid_argument(&result), "{:?}", result);
            Ok(())
        }
    });
}

#[test]
fn leases_and_timeouts_never_panic() {
    let fixture = Fixture::start();
    fixture.check(
        120,
        (durations(), "[a-z]{1,8}"),
        |client, (duration, name)| async move {
            let valid = lease_is_valid(duration);
            let lock = client.lock(&name).map_err(fail)?;
            let with_lease = lock.clone().with_lease(Lease::Fixed(duration));
            prop_assert_eq!(with_lease.is_ok(), valid, "{:?}", duration);
            prop_assert!(valid || is_invalid_argument(&with_lease));
            let simple = client
                .simple_lock(&format!("{name}-simple"))
                .map_err(fail)?
                .with_lease(Lease::Fixed(duration));
            prop_assert_eq!(simple.is_ok(), valid, "{:?}", duration);
            let redlock = Redlock::new(std::slice::from_ref(&client), &format!("{name}-redlock"))
                .map_err(fail)?
                .with_lease(Lease::Fixed(duration));
            prop_assert!(redlock.is_ok() || is_invalid_argument(&redlock));

            // Any wait on a free lock acquires at once, whatever its length.
            let guard = lock.lock_timeout(duration).await.map_err(fail)?;
            prop_assert!(guard.is_some(), "free lock, wait {:?}", duration);
            if let Some(guard) = guard {
                guard.unlock().await.map_err(fail)?;
            }
            let latch = client
                .count_down_latch(&format!("{name}-latch"))
                .map_err(fail)?
                .with_recheck_interval(duration);
            prop_assert_eq!(latch.is_ok(), duration >= Duration::from_millis(1));
            if let Ok(latch) = latch {
                // An open latch: any wait returns at once.
                prop_assert!(latch.wait_timeout(duration).await.map_err(fail)?.is_some());
            }

            let semaphore = client
                .expirable_semaphore(&format!("{name}-permits"))
                .map_err(fail)?
                .with_lease(Lease::Fixed(duration));
            prop_assert_eq!(semaphore.is_ok(), valid, "{:?}", duration);
            prop_assert!(valid || is_invalid_argument(&semaphore));
            if let Ok(semaphore) = semaphore {
                semaphore.try_set_permits(1).await.map_err(fail)?;
                if let Some(permit) = semaphore.try_acquire().await.map_err(fail)? {
                    // A lease of a millisecond may be over by now.
                    let released = permit.release().await;
                    prop_assert!(
                        released.is_ok() || matches!(released, Err(Error::LeaseExpired { .. })),
                        "{:?}",
                        released
                    );
                }
                semaphore.delete().await.map_err(fail)?;
            }
            Ok(())
        },
    );
}

#[test]
fn client_settings_never_panic() {
    let fixture = Fixture::start();
    let url = fixture.server.url();
    fixture.check(
        30,
        (durations(), durations(), durations()),
        move |_, (connect, response, lease)| {
            let url = url.clone();
            async move {
                let result = Client::builder(&url)
                    .connect_timeout(connect)
                    .response_timeout(response)
                    .watchdog_lease(lease)
                    .connect()
                    .await;
                let valid = !connect.is_zero() && !response.is_zero() && lease_is_valid(lease);
                // Below these, a real connect on a busy machine may run out of time; at or
                // above them it must succeed.
                let generous =
                    connect >= Duration::from_secs(5) && response >= Duration::from_secs(5);
                match &result {
                    Ok(_) => prop_assert!(valid),
                    Err(Error::InvalidArgument(_)) => prop_assert!(!valid),
                    // A valid but short timeout may be too short for a real connect (the
                    // handshake runs under both the connect and the response timeout).
                    Err(e) if matches!(e, Error::Connect { .. }) || e.is_connection_error() => {
                        prop_assert!(valid && !generous, "{result:?}");
                    }
                    Err(other) => prop_assert!(false, "{other:?}"),
                }
                Ok(())
            }
        },
    );
}

#[test]
fn permit_and_latch_counts_never_panic() {
    let counts = prop_oneof![Just(0_u32), Just(1), Just(u32::MAX), any::<u32>(), 0..5_u32];
    let deltas = prop_oneof![Just(0_i64), Just(i64::MIN), Just(i64::MAX), any::<i64>()];
    let fixture = Fixture::start();
    fixture.check(
        120,
        (counts.clone(), counts, deltas, "[a-z]{1,8}"),
        |client, (permits, wanted, delta, name)| async move {
            let semaphore = client.semaphore(&name).map_err(fail)?;
            let set = semaphore.try_set_permits(permits).await;
            prop_assert!(set.is_ok(), "{:?}", set);
            let taken = semaphore.try_acquire_many(wanted).await;
            match &taken {
                Err(Error::InvalidArgument(_)) => prop_assert_eq!(wanted, 0),
                Ok(permit) => {
                    prop_assert!(wanted > 0);
                    prop_assert_eq!(
                        permit.is_some(),
                        wanted <= permits,
                        "{} of {}",
                        wanted,
                        permits
                    );
                }
                Err(other) => prop_assert!(false, "{other:?}"),
            }
            drop(taken);
            let added = semaphore.add_permits(delta).await;
            match &added {
                Ok(()) => prop_assert!(delta != 0),
                Err(Error::InvalidArgument(_)) => prop_assert_eq!(delta, 0),
                // Past i64 the server refuses the sum.
                Err(e) if e.store_error::<RedisStoreError>().is_some() => {
                    prop_assert!(e.to_string().contains("overflow"), "{e}");
                }
                Err(other) => prop_assert!(false, "{other:?}"),
            }
            semaphore.delete().await.map_err(fail)?;

            let latch = client
                .count_down_latch(&format!("{name}-latch"))
                .map_err(fail)?;
            let set = latch.try_set_count(permits).await;
            prop_assert_eq!(set.is_ok(), permits > 0, "{:?}", set);
            prop_assert!(permits > 0 || is_invalid_argument(&set));
            latch.count_down().await.map_err(fail)?;
            let count = latch.count().await.map_err(fail)?;
            prop_assert_eq!(count, u64::from(permits.saturating_sub(1)));
            latch.delete().await.map_err(fail)?;
            Ok(())
        },
    );
}

#[test]
fn id_prefixes_counts_and_days_never_panic() {
    let prefixes = prop_oneof![
        3 => any::<String>(),
        3 => "[a-z{}*?\\[\\] ]{0,6}",
        1 => (MAX_ID_PREFIX_LEN - 1..MAX_ID_PREFIX_LEN + 2).prop_map(|n| "p".repeat(n)),
    ];
    let counts = prop_oneof![
        Just(0_u32),
        Just(MAX_IDS_PER_CALL + 1),
        Just(u32::MAX),
        1..50_u32
    ];
    let days = (-262_000_i32..262_000, 1..=12_u32, 1..=31_u32)
        .prop_filter_map("a real date", |(y, m, d)| NaiveDate::from_ymd_opt(y, m, d));
    let fixture = Fixture::start();
    fixture.check(
        120,
        (prefixes, counts, days, any::<u32>(), any::<u32>()),
        |client, (prefix, count, day, min, max)| async move {
            let valid = !prefix.is_empty()
                && prefix.len() <= MAX_ID_PREFIX_LEN
                && !prefix
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || "{}[]*?\\".contains(c));
            let ids = IdGenerator::new(&client);
            let one = ids.next_id(&prefix).await;
            prop_assert_eq!(one.is_ok(), valid, "{:?}: {:?}", prefix, one);
            prop_assert!(valid || is_invalid_argument(&one));
            let many = ids.next_ids("p", count).await;
            prop_assert_eq!(many.is_ok(), (1..=MAX_IDS_PER_CALL).contains(&count));
            prop_assert!(many.is_ok() || is_invalid_argument(&many));
            let counted = ids.count_for_day(&prefix, day).await;
            prop_assert_eq!(
                counted.is_ok(),
                valid,
                "{:?} {}: {:?}",
                prefix,
                day,
                counted
            );
            let built = IdGenerator::builder(&client).block_size(min, max).build();
            prop_assert!(built.is_ok() || is_invalid_argument(&built));
            Ok(())
        },
    );
}

proptest! {
    #![proptest_config(Config { cases: 2000, failure_persistence: None, ..Config::default() })]

    #[test]
    fn any_id_decodes_or_is_refused(id in any::<i64>()) {
        match IdGenerator::decode(id) {
            Ok(decoded) => prop_assert_eq!(decoded.to_id(), id),
            Err(Error::InvalidArgument(_)) => prop_assert!(id < 0),
            Err(other) => prop_assert!(false, "{other:?}"),
        }
    }
}

/// URLs built from parts, some pointing at the test server: whatever the shape, the
/// connect succeeds or fails with a typed error that never shows the password.
#[test]
fn url_shapes_never_panic_and_never_show_the_password() {
    let fixture = Fixture::start();
    let port = fixture.server.port();
    let schemes = prop_oneof![
        Just("redis"),
        Just("rediss"),
        Just("valkey"),
        Just("unix"),
        Just("http"),
        Just("")
    ];
    let passwords = prop_oneof!["[a-zA-Z]{8,12}", "[!-~]{8,12}"];
    let users = prop_oneof![Just(""), Just("default"), Just("someone")];
    let hosts = prop_oneof![
        Just("127.0.0.1"),
        Just("localhost"),
        Just("[::1]"),
        Just("0.0.0.0"),
        Just("")
    ];
    let ports = prop_oneof![
        Just(port.to_string()),
        Just(String::new()),
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("99999".to_owned()),
        Just("port".to_owned())
    ];
    let paths = prop_oneof![
        Just(""),
        Just("/"),
        Just("/0"),
        Just("/15"),
        Just("/16"),
        Just("/x"),
        Just("/-1")
    ];
    let tails = prop_oneof![
        Just(""),
        Just("?protocol=resp2"),
        Just("?protocol=9"),
        Just("#insecure"),
        Just("#other")
    ];
    let shapes = (
        schemes,
        (users, proptest::option::of(passwords)),
        hosts,
        ports,
        paths,
        tails,
    );
    fixture.check(
        60,
        shapes,
        |_, (scheme, (user, password), host, port, path, tail)| async move {
            let userinfo = match &password {
                Some(password) => format!("{user}:{password}@"),
                None if user.is_empty() => String::new(),
                None => format!("{user}@"),
            };
            let port = if port.is_empty() {
                String::new()
            } else {
                format!(":{port}")
            };
            let url = format!("{scheme}://{userinfo}{host}{port}{path}{tail}");
            let result = Client::builder(&url)
                .connect_timeout(Duration::from_millis(500))
                .connect()
                .await;
            if let Err(error) = &result {
                prop_assert!(
                    matches!(error, Error::InvalidArgument(_) | Error::Connect { .. }),
                    "{url}: {error:?}"
                );
                if let Some(password) = &password {
                    let shown = format!("{error} {error:?}");
                    prop_assert!(!shown.contains(password.as_str()), "{shown}");
                }
            }
            Ok(())
        },
    );
}

/// Arbitrary text as a URL, kept from naming a network host (no `//`): refused with
/// [`Error::InvalidArgument`] or, for a `unix:` path, [`Error::Connect`].
#[test]
fn arbitrary_text_as_a_url_is_refused_cleanly() {
    let fixture = Fixture::start();
    let text = prop_oneof![
        any::<String>(),
        "(redis|rediss|unix|redis\\+unix):[!-~]{0,20}".prop_map(|s| s.replace("//", "/"))
    ]
    .prop_filter("no host", |s| !s.contains("//"));
    fixture.check(300, text, |_, text| async move {
        let result = Client::builder(&text)
            .connect_timeout(Duration::from_millis(200))
            .connect()
            .await;
        prop_assert!(
            matches!(
                result,
                Err(Error::InvalidArgument(_) | Error::Connect { .. })
            ),
            "{text:?}: {result:?}"
        );
        Ok(())
    });
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}
