//! Every variant the lab knows: the service's (run by the `seckill serve` instances) and
//! those it runs itself.

use std::fmt;

use seckill::oversell::Variant;

use super::variant::DirectVariant;

/// A variant of the lab, as `--variants` names it.
///
/// ```
/// use seckill::oversell::Variant;
/// use seckill_lab::{DirectVariant, LabVariant};
///
/// assert_eq!(LabVariant::parse("naive"), Some(LabVariant::Service(Variant::Naive)));
/// assert_eq!(
///     LabVariant::parse("db-for-update"),
///     Some(LabVariant::Direct(DirectVariant::DbForUpdate))
/// );
/// assert_eq!(LabVariant::all().len(), Variant::ALL.len() + DirectVariant::ALL.len());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabVariant {
    /// Run by the `seckill serve` instances (`POST /lab/deduct/{variant}`).
    Service(Variant),
    /// Run by the lab in its own process.
    Direct(DirectVariant),
}

impl LabVariant {
    /// Every variant, in the lab's order: the service's, then the lab's own.
    pub fn all() -> Vec<Self> {
        Variant::ALL
            .into_iter()
            .map(Self::Service)
            .chain(DirectVariant::ALL.into_iter().map(Self::Direct))
            .collect()
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Service(v) => v.name(),
            Self::Direct(v) => v.name(),
        }
    }

    /// The variant called `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Variant::parse(name)
            .map(Self::Service)
            .or_else(|| DirectVariant::parse(name).map(Self::Direct))
    }
}

impl From<Variant> for LabVariant {
    fn from(v: Variant) -> Self {
        Self::Service(v)
    }
}

impl From<DirectVariant> for LabVariant {
    fn from(v: DirectVariant) -> Self {
        Self::Direct(v)
    }
}

impl fmt::Display for LabVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
