//! The README's example: `cargo run -p ferrisson --example readme -- redis://127.0.0.1:6379`

use std::time::Duration;

use ferrisson::Lease;
use ferrisson::redis::Client;

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let lock = client.lock("voucher:42")?;

    let guard = lock.lock().await?; // waits for a release message, not a poll
    let token = guard.fencing_token(); // grows with every new holder
    tokio::select! {
        () = guard.lost() => eprintln!("lock lost: stop writing"),
        write = client.fenced_set("voucher:42:stock", b"199", token) => {
            println!("write with token {token}: {:?}", write?); // older tokens are refused
        }
    }
    guard.unlock().await?; // dropping the guard also releases, on a spawned task

    let fixed = lock.with_lease(Lease::Fixed(Duration::from_secs(10)))?;
    if let Some(guard) = fixed.lock_timeout(Duration::from_millis(500)).await? {
        guard.unlock().await?;
    }
    Ok(())
}
