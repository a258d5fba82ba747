//! The lab: starts Redis (one server, a Sentinel group or a Redis Cluster) and `seckill
//! serve` processes, fires the load (by default 200 clients at once, 4 requests each)
//! at every variant, checks the invariants in Redis and the database, then runs the
//! voucher scenario with the lock flow, the same flow without the lock, and the Lua flow.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use seckill::OrderFlow;
use seckill::db::Db;
use seckill::error::one_line;
use seckill::oversell::{LabState, Variant};

use crate::cluster::new_admin_token;
use crate::cluster::{Cluster, InstanceArgs};
use crate::expect::expected;
use crate::in_process::{DirectLoad, DirectVariant, Place, Store, run_direct};
use crate::load::{LoadResult, MakeRequest, fire, http_client, instance};
use crate::machine::Machine;
use crate::options::LabOptions;
use crate::other_stores::{OtherStores, machine_databases, redact};
use crate::report::{LeftOutVariant, Report, VariantRow, VoucherRow};
use crate::scratch::ScratchDb;
use crate::servers::start_servers;
use crate::shop::{buy, log_in, open_voucher};
use crate::stores::{StoreServers, measure_stores};
use crate::topology::OwnRedis;

fn progress_bar(enabled: bool, len: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// Runs the lab, then measures the stores (`--store-time` per phase), and writes
/// `report.json`, `table.txt`, `chart.svg` and `report.html` under `out`.
///
/// # Errors
///
/// When a setting is invalid, a Redis server, the database or an instance cannot be
/// started, or a request to set up a run fails. A variant that misbehaves is not an
/// error: it is the lab's result.
pub async fn run(options: &LabOptions) -> anyhow::Result<Report> {
    options.validate()?;
    let mut machine = Machine::read();
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    let (redis_url, _main) = match &options.redis {
        Some(url) => (url.clone(), None),
        None => {
            let own = OwnRedis::start(options.topology).await?;
            (own.url(), Some(own))
        }
    };
    let needs_redlock = options.service_variants().contains(&Variant::Redlock);
    let (redlock, _redlock_servers) = if !options.redlock_redis.is_empty() || !needs_redlock {
        (options.redlock_redis.clone(), None)
    } else {
        let (urls, own) = start_servers(seckill::settings::MIN_REDLOCK_SERVERS)?;
        (urls, Some(own))
    };
    let scratch =
        ScratchDb::create(options.database.as_deref(), &options.out, "seckill_lab").await?;
    let result = run_on(options, &scratch, redis_url.clone(), redlock.clone()).await;
    let dropped = scratch.drop().await;
    let report = result?;
    dropped?;

    // The servers the variants the lab runs itself and the store table need: ZooKeeper
    // and etcd started by the lab, the machine's databases.
    let skipped = options.store_time.is_zero();
    let direct = options.direct_variants();
    let needs_coordinators = direct.iter().any(|v| {
        v.stores()
            .iter()
            .any(|s| matches!(s, Store::ZooKeeper | Store::Etcd))
    });
    let others = if skipped && !needs_coordinators {
        None
    } else {
        Some(OtherStores::reach().await)
    };
    let mut report = report;
    let began = std::time::Instant::now();
    let (rows, not_run) = run_direct_variants(options, &direct, others.as_ref()).await?;
    report.in_process_s = began.elapsed().as_secs_f64();
    report.variants.extend(rows);
    report.variants_left_out = not_run;

    // The store trade-off, on the servers above, once the instances are stopped, and on
    // the other stores the lab can reach or start.
    let servers = StoreServers {
        redis_words: report.redis.clone(),
        redis: redis_url,
        redlock_words: if options.redlock_redis.is_empty() {
            format!("{} Redis servers started by the lab", redlock.len())
        } else {
            format!("{} Redis servers given with --redlock-redis", redlock.len())
        },
        redlock,
        others: others
            .as_ref()
            .filter(|_| !skipped)
            .map(|o| o.stores.clone())
            .unwrap_or_default(),
    };
    let stores = if skipped {
        Vec::new()
    } else {
        measure_stores(&servers, options.store_time).await
    };
    let left_out = others
        .as_ref()
        .map(|o| o.left_out.clone())
        .unwrap_or_default();
    let mut report = report.with_stores(options.store_time, stores, |id| {
        if skipped {
            return Some("the store measurement was skipped (--store-time 0s)".into());
        }
        if id == "redlock" {
            return Some(
                "the redlock variant was not run, so the lab started no Redlock servers".into(),
            );
        }
        left_out
            .iter()
            .find(|(store, _)| *store == id)
            .map(|(_, why)| why.clone())
    });
    // The servers the lab started for the measurement stop here.
    drop(others);
    machine.finish();
    report.machine = machine;
    report.write(&options.out)?;
    Ok(report)
}

/// Runs the variants the lab runs itself, each once on each of its stores it can reach:
/// their rows, and the runs it could not make, with why (also said on stderr).
///
/// # Errors
///
/// When the lab's Redis server for them cannot be started. A run that fails is listed
/// with its error instead of a row.
async fn run_direct_variants(
    options: &LabOptions,
    direct: &[DirectVariant],
    others: Option<&OtherStores>,
) -> anyhow::Result<(Vec<VariantRow>, Vec<LeftOutVariant>)> {
    let mut rows = Vec::new();
    let mut not_run = Vec::new();
    if direct.is_empty() {
        return Ok((rows, not_run));
    }
    // The stock of the Redis, ZooKeeper and etcd variants and the timestamp lock: a
    // server of their own (one server, whatever --topology says).
    let needs_redis = direct.iter().any(|v| {
        v.stores()
            .iter()
            .any(|s| matches!(s, Store::Redis | Store::ZooKeeper | Store::Etcd))
    });
    let (redis_urls, _redis) = if needs_redis {
        let (urls, own) = start_servers(1)?;
        (urls, Some(own))
    } else {
        (Vec::new(), None)
    };
    let redis = redis_urls.first().cloned().unwrap_or_default();
    let databases = machine_databases();
    let load = DirectLoad {
        clients: options.clients,
        requests: options.clients * options.loops,
        stock: options.stock,
        instances: options.instances,
        lock_wait: options.lab.lock_wait,
        lease: options.lab.lease,
        fault_at: options.lab.fault_at,
        clock_skew: options.clock_skew,
    };
    let started = |url: Option<&String>, id: &str| -> Result<String, String> {
        url.cloned().ok_or_else(|| {
            others
                .and_then(|o| o.left_out.iter().find(|(s, _)| *s == id))
                .map_or_else(|| format!("{id} was not started"), |(_, why)| why.clone())
        })
    };
    for &variant in direct {
        for &store in variant.stores() {
            let place = match store {
                Store::Postgres | Store::MariaDb => databases
                    .iter()
                    .find(|d| d.id == store.id())
                    .map_or_else(|| Err("unknown database".to_owned()), |d| d.url.clone())
                    .map(|url| Place {
                        words: format!("{} at {}", store.id(), redact(&url)),
                        url,
                        redis: redis.clone(),
                    }),
                Store::Redis => Ok(Place {
                    url: redis.clone(),
                    redis: redis.clone(),
                    words: "a Redis server started by the lab".into(),
                }),
                Store::ZooKeeper => started(
                    others.and_then(|o| o.zookeeper_url.as_ref()),
                    "zookeeper",
                )
                .map(|url| Place {
                    url: format!("{url}/seckill-lab-variants"),
                    redis: redis.clone(),
                    words: "a ZooKeeper server started by the lab (the stock in a Redis server of the lab)".into(),
                }),
                Store::Etcd => started(others.and_then(|o| o.etcd_url.as_ref()), "etcd").map(
                    |url| Place {
                        url,
                        redis: redis.clone(),
                        words: "an etcd member started by the lab (the stock in a Redis server of the lab)".into(),
                    },
                ),
            };
            let name = variant.row_name(store);
            match place {
                Ok(place) => match run_direct(variant, store, &place, &load).await {
                    Ok(row) => rows.push(row),
                    Err(e) => {
                        let why = format!("its run failed: {}", one_line(e.as_ref()));
                        eprintln!("seckill-lab: {name}: {why}");
                        not_run.push(LeftOutVariant {
                            variant: name,
                            why,
                            failed: true,
                        });
                    }
                },
                Err(why) => {
                    eprintln!("seckill-lab: skipped {name}: {why}");
                    not_run.push(LeftOutVariant {
                        variant: name,
                        why,
                        failed: false,
                    });
                }
            }
        }
    }
    Ok((rows, not_run))
}

async fn run_on(
    options: &LabOptions,
    scratch: &ScratchDb,
    redis_url: String,
    redlock: Vec<String>,
) -> anyhow::Result<Report> {
    let db = scratch.open().await?;
    // The voucher scenario shows what each order flow does alone: no unique index
    // behind it. On the lab's own database only.
    scratch.without_unique_order_index().await?;

    let instance_args = InstanceArgs {
        binary: options.binary.clone(),
        redis: redis_url,
        database: scratch.url().to_owned(),
        redlock,
        order_flow: OrderFlow::Lock,
        watchdog_lease: options.watchdog_lease,
        lab: options.lab.clone(),
        log_dir: Some(options.out.join("logs")),
        extra_args: Vec::new(),
        admin_token: Some(new_admin_token()),
    };
    let total = options.clients * options.loops;
    let voucher_requests = if options.vouchers {
        3 * (options.users + options.users * options.attempts)
    } else {
        0
    };
    let bar = progress_bar(
        options.progress,
        (options.service_variants().len() * total + voucher_requests) as u64,
    );
    let http = http_client(options.clients, instance_args.admin_token.as_deref())?;

    let cluster = Cluster::start(options.instances, &instance_args).await?;
    let mut rows = Vec::new();
    for variant in options.service_variants() {
        bar.set_message(variant.name());
        match run_variant(&http, &cluster, options, variant, &bar).await {
            Ok(row) => rows.push(row),
            Err(e) => {
                let _ = cluster.stop().await;
                return Err(e);
            }
        }
    }

    let mut vouchers = Vec::new();
    if options.vouchers {
        bar.set_message("vouchers, lock");
        let lock = run_vouchers(&http, &cluster, &db, options, OrderFlow::Lock, &bar).await;
        cluster.stop().await?;
        vouchers.push(lock?);
        for flow in [OrderFlow::NoLock, OrderFlow::Lua] {
            let other = Cluster::start(
                options.instances,
                &InstanceArgs {
                    order_flow: flow,
                    ..instance_args.clone()
                },
            )
            .await?;
            bar.set_message(format!("vouchers, {}", flow.name()));
            let row = run_vouchers(&http, &other, &db, options, flow, &bar).await;
            other.stop().await?;
            vouchers.push(row?);
        }
    } else {
        cluster.stop().await?;
    }
    bar.finish_and_clear();
    db.close().await;

    Ok(Report::new(options, scratch.backend(), rows, vouchers))
}

async fn run_variant(
    http: &reqwest::Client,
    cluster: &Cluster,
    options: &LabOptions,
    variant: Variant,
    bar: &ProgressBar,
) -> anyhow::Result<VariantRow> {
    let urls: Arc<Vec<String>> = Arc::new(cluster.urls().to_vec());
    let reset = http
        .post(format!("{}/lab/stock", urls[0]))
        .json(&serde_json::json!({ "stock": options.stock }))
        .send()
        .await?;
    successful(reset, "POST /lab/stock").await?;
    let make: MakeRequest = {
        let urls = Arc::clone(&urls);
        Arc::new(move |http, i| {
            http.post(format!(
                "{}/lab/deduct/{}",
                instance(&urls, i),
                variant.name()
            ))
        })
    };
    let progress = bar.clone();
    let load = fire(
        http,
        options.clients,
        options.clients * options.loops,
        make,
        Arc::new(move || progress.inc(1)),
    )
    .await;
    let state: LabState = successful(
        http.get(format!("{}/lab/stock", urls[0])).send().await?,
        "GET /lab/stock",
    )
    .await?
    .json()
    .await?;
    // A fault is injected when its holder comes while stock is left.
    let faults = options.lab.fault_at != 0 && options.lab.fault_at <= options.stock as u64;
    let expected = expected(variant, options.instances, faults);
    Ok(VariantRow::new(
        variant,
        expected,
        options.stock,
        &load,
        &state,
    ))
}

/// `response` when its status is a success; otherwise an error naming `what`, the status
/// and what the service said (its error's code and message: which store failed and how),
/// escaped and cut to one short line.
async fn successful(response: reqwest::Response, what: &str) -> anyhow::Result<reqwest::Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    let said: String = format!("{:?}", body.trim()).chars().take(300).collect();
    anyhow::bail!("{what} failed: {status}: {said}")
}

/// Counts of reply codes (`created` for an order, else the error code).
fn reply_codes(load: &LoadResult) -> BTreeMap<String, usize> {
    let mut codes = BTreeMap::new();
    for s in &load.samples {
        let code = match (s.status, s.body.get("code").and_then(|c| c.as_str())) {
            (Some(200), _) => "created".to_owned(),
            (_, Some(code)) => code.to_owned(),
            (Some(status), None) => format!("HTTP {status}"),
            (None, None) => "transport error".to_owned(),
        };
        *codes.entry(code).or_insert(0) += 1;
    }
    codes
}

async fn run_vouchers(
    http: &reqwest::Client,
    cluster: &Cluster,
    db: &Db,
    options: &LabOptions,
    flow: OrderFlow,
    bar: &ProgressBar,
) -> anyhow::Result<VoucherRow> {
    let urls: Arc<Vec<String>> = Arc::new(cluster.urls().to_vec());
    let title = format!("lab voucher ({} flow)", flow.name());
    let voucher_id = open_voucher(http, &urls[0], &title, options.stock).await?;

    // Log every buyer in; phone numbers differ per scenario so the users are fresh.
    let first_phone: u64 = match flow {
        OrderFlow::Lock => 13_100_000_000,
        OrderFlow::NoLock => 13_200_000_000,
        OrderFlow::Lua => 13_300_000_000,
    };
    let progress = bar.clone();
    let on_done: Arc<dyn Fn() + Send + Sync> = Arc::new(move || progress.inc(1));
    let tokens = log_in(
        http,
        &urls,
        options.clients,
        first_phone,
        options.users,
        Arc::clone(&on_done),
    )
    .await?;
    // Each buyer's attempts are adjacent, so they run at once on different instances.
    let attempts = options.attempts.max(1);
    let load = buy(
        http,
        &urls,
        options.clients,
        voucher_id,
        tokens,
        attempts,
        on_done,
    )
    .await;
    let orders = db.orders(voucher_id).await?;
    let stock_left = db.voucher(voucher_id).await?.map_or(0, |v| v.stock);
    let duplicates = db.users_with_several_orders(voucher_id).await?;
    Ok(VoucherRow {
        order_flow: flow,
        users: options.users,
        attempts,
        requests: load.samples.len(),
        stock: options.stock,
        orders: orders.len() as i64,
        users_with_two_orders: duplicates,
        stock_left,
        replies: reply_codes(&load),
        throughput: load.throughput(),
        p50_ms: load.latency_ms(0.5),
        p99_ms: load.latency_ms(0.99),
    })
}

#[cfg(test)]
mod tests {
    use super::successful;

    use http::StatusCode;

    fn response(status: StatusCode, body: impl Into<String>) -> reqwest::Response {
        let mut response = http::Response::new(body.into());
        *response.status_mut() = status;
        reqwest::Response::from(response)
    }

    #[tokio::test]
    async fn a_refused_call_says_what_the_service_said_on_one_line() {
        let body =
            "{\"code\":\"UNAVAILABLE\",\"message\":\"redis: CLUSTERDOWN\nThe cluster is down\"}";
        let error = successful(
            response(StatusCode::SERVICE_UNAVAILABLE, body),
            "POST /lab/stock",
        )
        .await
        .expect_err("503 is no success")
        .to_string();
        assert!(
            error.starts_with("POST /lab/stock failed: 503 Service Unavailable: "),
            "{error}"
        );
        assert!(error.contains("CLUSTERDOWN"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }

    #[tokio::test]
    async fn a_long_answer_is_cut() {
        let error = successful(
            response(StatusCode::INTERNAL_SERVER_ERROR, "x".repeat(10_000)),
            "GET /lab/stock",
        )
        .await
        .expect_err("500 is no success")
        .to_string();
        assert!(error.len() < 400, "{} bytes", error.len());
    }

    #[tokio::test]
    async fn a_success_is_handed_back() {
        let ok = successful(response(StatusCode::OK, "{}"), "GET /lab/stock").await;
        assert_eq!(ok.map(|r| r.status().as_u16()).ok(), Some(200));
    }
}
