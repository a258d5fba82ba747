//! The conformance suite on the in-process reference store.

use ferrisson_conformance::{MemoryUnderTest, run_all};

#[tokio::test(flavor = "multi_thread")]
async fn the_memory_store_conforms() -> ferrisson_core::Result<()> {
    run_all(&MemoryUnderTest::default()).await
}
