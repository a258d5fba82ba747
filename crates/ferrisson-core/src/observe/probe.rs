//! What one primitive handle records its metrics and spans under: its store, its name, its
//! kind and the class of its name, resolved once when the handle is made.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::observe::metrics::{Instruments, Kind};

/// The application's mapping from a primitive's name to its `class` label.
pub type ClassFn = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Most classes one client keeps pre-built keys for. Past this, a handle whose class is
/// new builds its keys when it is made (a few allocations per handle, none per event).
const MAX_CACHED_CLASSES: usize = 4096;

/// A client's metric settings: its store's name, the class function if the application
/// gave one, and the keys built for each class seen so far.
///
/// ```
/// use ferrisson_core::observe::{Classes, Kind};
///
/// let classes = Classes::new("memory", None);
/// let probe = classes.probe(Kind::Lock, &"orders:42".into());
/// assert_eq!(&*probe.name, "orders:42");
/// assert_eq!(probe.kind(), Kind::Lock);
/// ```
pub struct Classes {
    store: &'static str,
    class_of: Option<ClassFn>,
    /// Keys without a class label, one set per kind, built once per client.
    unclassed: Vec<Arc<Instruments>>,
    built: Mutex<HashMap<(Kind, String), Arc<Instruments>>>,
}

impl fmt::Debug for Classes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classes")
            .field("store", &self.store)
            .field("class_of", &self.class_of.as_ref().map(|_| "fn"))
            .finish_non_exhaustive()
    }
}

impl Classes {
    /// The settings of a client of `store`, with `class_of` computing the `class` label
    /// (`None`: no class label).
    pub fn new(store: &'static str, class_of: Option<ClassFn>) -> Self {
        Self {
            store,
            unclassed: Kind::ALL
                .iter()
                .map(|&kind| Arc::new(Instruments::new(store, kind, None)))
                .collect(),
            class_of,
            built: Mutex::default(),
        }
    }

    /// The store these settings label metrics with.
    pub fn store(&self) -> &'static str {
        self.store
    }

    /// The probe of a `kind` primitive called `name`.
    pub fn probe(&self, kind: Kind, name: &Arc<str>) -> Probe {
        Probe {
            name: Arc::clone(name),
            instruments: self.instruments(kind, name),
        }
    }

    fn instruments(&self, kind: Kind, name: &str) -> Arc<Instruments> {
        let Some(class_of) = &self.class_of else {
            return Arc::clone(&self.unclassed[kind as usize]);
        };
        let class = class_of(name);
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(instruments) = built.get(&(kind, class.clone())) {
            return Arc::clone(instruments);
        }
        let instruments = Arc::new(Instruments::new(self.store, kind, Some(&class)));
        if built.len() < MAX_CACHED_CLASSES {
            built.insert((kind, class), Arc::clone(&instruments));
        }
        instruments
    }
}

/// A primitive handle's name and metric keys; cheap to clone (two `Arc`s).
#[derive(Debug, Clone)]
pub struct Probe {
    /// The primitive's name.
    pub name: Arc<str>,
    /// Its metric keys.
    pub instruments: Arc<Instruments>,
}

impl Probe {
    /// The primitive's kind.
    pub fn kind(&self) -> Kind {
        self.instruments.kind
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Classes, Kind};

    #[test]
    fn unclassed_probes_share_one_set_of_keys_per_kind() {
        let classes = Classes::new("test", None);
        let a = classes.probe(Kind::Lock, &Arc::from("orders:1"));
        let b = classes.probe(Kind::Lock, &Arc::from("orders:2"));
        let c = classes.probe(Kind::Semaphore, &Arc::from("orders:1"));
        assert!(Arc::ptr_eq(&a.instruments, &b.instruments));
        assert!(!Arc::ptr_eq(&a.instruments, &c.instruments));
        assert_eq!(c.kind(), Kind::Semaphore);
    }

    #[test]
    fn a_class_is_built_once_and_shared() {
        let classes = Classes::new(
            "test",
            Some(Arc::new(|name: &str| {
                name.split(':').next().unwrap_or(name).to_owned()
            })),
        );
        let a = classes.probe(Kind::Lock, &Arc::from("orders:1"));
        let b = classes.probe(Kind::Lock, &Arc::from("orders:2"));
        let c = classes.probe(Kind::Lock, &Arc::from("users:2"));
        assert!(Arc::ptr_eq(&a.instruments, &b.instruments));
        assert!(!Arc::ptr_eq(&a.instruments, &c.instruments));
        assert_eq!(&*b.name, "orders:2");
    }
}
