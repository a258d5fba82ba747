//! What one primitive handle records its metrics and spans under: its name, its kind and
//! the class of its name, resolved once when the handle is made.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use crate::observe::metrics::{Instruments, Kind};

/// The application's mapping from a primitive's name to its `class` label.
pub(crate) type ClassFn = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Most classes one client keeps pre-built keys for. Past this, a handle whose class is
/// new builds its keys when it is made (a few allocations per handle, none per event).
const MAX_CACHED_CLASSES: usize = 4096;

/// Keys without a class label, one set per kind, shared by every client.
static UNCLASSED: LazyLock<Vec<Arc<Instruments>>> = LazyLock::new(|| {
    Kind::ALL
        .iter()
        .map(|&kind| Arc::new(Instruments::new(kind, None)))
        .collect()
});

/// A client's metric settings: the class function if the application gave one, and the
/// keys built for each class seen so far.
#[derive(Default)]
pub(crate) struct Classes {
    class_of: Option<ClassFn>,
    built: Mutex<HashMap<(Kind, String), Arc<Instruments>>>,
}

impl fmt::Debug for Classes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classes")
            .field("class_of", &self.class_of.as_ref().map(|_| "fn"))
            .finish_non_exhaustive()
    }
}

impl Classes {
    pub(crate) fn new(class_of: Option<ClassFn>) -> Self {
        Self {
            class_of,
            built: Mutex::default(),
        }
    }

    /// The probe of a `kind` primitive called `name`.
    pub(crate) fn probe(&self, kind: Kind, name: &Arc<str>) -> Probe {
        Probe {
            name: Arc::clone(name),
            instruments: self.instruments(kind, name),
        }
    }

    fn instruments(&self, kind: Kind, name: &str) -> Arc<Instruments> {
        let Some(class_of) = &self.class_of else {
            return Arc::clone(&UNCLASSED[kind as usize]);
        };
        let class = class_of(name);
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(instruments) = built.get(&(kind, class.clone())) {
            return Arc::clone(instruments);
        }
        let instruments = Arc::new(Instruments::new(kind, Some(&class)));
        if built.len() < MAX_CACHED_CLASSES {
            built.insert((kind, class), Arc::clone(&instruments));
        }
        instruments
    }
}

/// A primitive handle's name and metric keys; cheap to clone (two `Arc`s).
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) name: Arc<str>,
    pub(crate) instruments: Arc<Instruments>,
}

impl Probe {
    pub(crate) fn kind(&self) -> Kind {
        self.instruments.kind
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Classes, Kind};

    #[test]
    fn unclassed_probes_share_one_set_of_keys_per_kind() {
        let classes = Classes::default();
        let a = classes.probe(Kind::Lock, &Arc::from("orders:1"));
        let b = classes.probe(Kind::Lock, &Arc::from("orders:2"));
        let c = classes.probe(Kind::Semaphore, &Arc::from("orders:1"));
        assert!(Arc::ptr_eq(&a.instruments, &b.instruments));
        assert!(!Arc::ptr_eq(&a.instruments, &c.instruments));
        assert_eq!(c.kind(), Kind::Semaphore);
    }

    #[test]
    fn a_class_is_built_once_and_shared() {
        let classes = Classes::new(Some(Arc::new(|name: &str| {
            name.split(':').next().unwrap_or(name).to_owned()
        })));
        let a = classes.probe(Kind::Lock, &Arc::from("orders:1"));
        let b = classes.probe(Kind::Lock, &Arc::from("orders:2"));
        let c = classes.probe(Kind::Lock, &Arc::from("users:2"));
        assert!(Arc::ptr_eq(&a.instruments, &b.instruments));
        assert!(!Arc::ptr_eq(&a.instruments, &c.instruments));
        assert_eq!(&*b.name, "orders:2");
    }
}
