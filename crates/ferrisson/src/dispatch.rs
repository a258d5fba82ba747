//! The delegation every store-neutral guard shares: its enum has a variant per store and
//! each contract call goes to the variant's guard.

/// Implements [`Guard`](ferrisson_core::Guard) for `$ty` by handing every call to the
/// variant's guard, with `$each` the defining module's `each_store!` (which lists the
/// stores that enum has).
macro_rules! delegate_guard {
    ($ty:ty, $each:ident) => {
        impl ferrisson_core::Guard for $ty {
            fn name(&self) -> &str {
                $each!(self, Self, guard => ferrisson_core::Guard::name(guard))
            }

            fn is_held(&self) -> bool {
                $each!(self, Self, guard => ferrisson_core::Guard::is_held(guard))
            }

            fn remaining(&self) -> std::time::Duration {
                $each!(self, Self, guard => ferrisson_core::Guard::remaining(guard))
            }

            async fn lost(&self) {
                $each!(self, Self, guard => ferrisson_core::Guard::lost(guard).await);
            }

            async fn unlock(self) -> ferrisson_core::Result<()> {
                $each!(self, Self, guard => ferrisson_core::Guard::unlock(guard).await)
            }
        }
    };
}

/// Implements [`Fenced`](ferrisson_core::Fenced) for `$ty` as [`delegate_guard!`] does
/// [`Guard`](ferrisson_core::Guard).
macro_rules! delegate_fenced {
    ($ty:ty, $each:ident) => {
        impl ferrisson_core::Fenced for $ty {
            fn fencing_token(&self) -> ferrisson_core::FencingToken {
                $each!(self, Self, guard => ferrisson_core::Fenced::fencing_token(guard))
            }
        }
    };
}
