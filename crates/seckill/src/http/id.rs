//! Ids in JSON as decimal strings.
//!
//! The service's ids are 64-bit (`IdGenerator` ids are near 2^60). A JSON number that
//! large loses its last digits in JavaScript and in any parser that reads numbers as
//! doubles, and a rounded voucher id then finds nothing, so every reply writes ids as
//! strings, as APIs with 64-bit ids do. Paths and bodies take the string form, and a
//! body may still give a number.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 64-bit id, written to JSON as a string.
///
/// ```
/// use seckill::http::id::Id;
///
/// let id = Id(663_570_845_209_198_602);
/// assert_eq!(serde_json::to_string(&id).unwrap(), r#""663570845209198602""#);
/// let back: Id = serde_json::from_str(r#""663570845209198602""#).unwrap();
/// assert_eq!(back, id);
/// // A number is still accepted in a body.
/// let number: Id = serde_json::from_str("42").unwrap();
/// assert_eq!(number, Id(42));
/// assert!(serde_json::from_str::<Id>(r#""4.2""#).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub i64);

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Id {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IdVisitor)
    }
}

struct IdVisitor;

impl Visitor<'_> for IdVisitor {
    type Value = Id;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an id: a decimal integer, as a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
        v.parse()
            .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
        Ok(Id(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
        i64::try_from(v)
            .map(Id)
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }
}

impl crate::http::extract::PathParam for Id {
    const WHAT: &'static str = "an id: a decimal integer of at most 64 bits";
}
