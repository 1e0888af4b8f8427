//! Decoding a spec's Go-JSON tree (oci::gojson) into typed views the way
//! Go's encoding/json decodes into runc's specs-go types (decode.go): the
//! primitives both the spec's views (oci::spec) and its device and cgroup
//! views (oci::spec_devices) are built from.

use crate::oci::gojson::{fold, Node, Value as GoValue};

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("config.json is not a JSON object")]
    NotAnObject,
    #[error("config.json field `{0}` has the wrong type")]
    WrongType(&'static str),
}

pub(crate) type R = Result<(), SpecError>;

/// A Go slice as repeated decodes leave it: `len` visible elements over a
/// backing array whose later elements a shorter decode left behind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoSlice<T> {
    pub(crate) backing: Vec<T>,
    pub(crate) len: usize,
}

impl<T> GoSlice<T> {
    pub fn items(&self) -> &[T] {
        &self.backing[..self.len]
    }
}

/// Decoding one JSON value into an existing Go value.
pub(crate) trait Decode: Default {
    fn decode(&mut self, n: &Node, path: &'static str) -> R;
}

impl Decode for String {
    fn decode(&mut self, n: &Node, path: &'static str) -> R {
        match &n.value {
            GoValue::String(s) => *self = s.clone(),
            GoValue::Null => {}
            _ => return Err(SpecError::WrongType(path)),
        }
        Ok(())
    }
}

impl Decode for bool {
    fn decode(&mut self, n: &Node, path: &'static str) -> R {
        match &n.value {
            GoValue::Bool(b) => *self = *b,
            GoValue::Null => {}
            _ => return Err(SpecError::WrongType(path)),
        }
        Ok(())
    }
}

impl Decode for u64 {
    fn decode(&mut self, n: &Node, path: &'static str) -> R {
        match &n.value {
            // Go decodes into uint64 only an integer literal that fits;
            // anything else (a fraction, an exponent, a sign) is an error.
            GoValue::Number(s) => *self = s.parse().map_err(|_| SpecError::WrongType(path))?,
            GoValue::Null => {}
            _ => return Err(SpecError::WrongType(path)),
        }
        Ok(())
    }
}

impl Decode for u32 {
    fn decode(&mut self, n: &Node, path: &'static str) -> R {
        let mut wide = u64::from(*self);
        wide.decode(n, path)?;
        *self = u32::try_from(wide).map_err(|_| SpecError::WrongType(path))?;
        Ok(())
    }
}

/// A slice field (`[]T`): null clears it, `[]` makes a fresh empty one, a
/// list decodes into the elements already there (decode.go array).
pub(crate) fn slice<T: Decode + Clone>(
    slot: &mut Option<GoSlice<T>>,
    n: &Node,
    path: &'static str,
) -> R {
    match &n.value {
        GoValue::Null => *slot = None,
        GoValue::Array(items) if items.is_empty() => *slot = Some(GoSlice::default()),
        GoValue::Array(items) => {
            let s = slot.get_or_insert_with(GoSlice::default);
            for (i, item) in items.iter().enumerate() {
                if i >= s.backing.len() {
                    s.backing.push(T::default());
                }
                s.backing[i].decode(item, path)?;
            }
            s.len = items.len();
        }
        _ => return Err(SpecError::WrongType(path)),
    }
    Ok(())
}

/// A struct's members, each with its key folded as Go matches field names;
/// null is ignored (a struct, not a pointer).
pub(crate) fn members(n: &Node, path: &'static str, mut f: impl FnMut(&str, &Node) -> R) -> R {
    match &n.value {
        GoValue::Null => Ok(()),
        GoValue::Object(ms) => {
            for m in ms {
                f(&fold(&m.key), &m.node)?;
            }
            Ok(())
        }
        _ => Err(SpecError::WrongType(path)),
    }
}

/// A pointer-to-struct field: null clears it, an object decodes into the
/// struct already there (or a new one).
pub(crate) fn pointer<T: Default>(
    slot: &mut Option<T>,
    n: &Node,
    path: &'static str,
    f: impl FnMut(&mut T, &str, &Node) -> R,
) -> R {
    if n.is_null() {
        *slot = None;
        return Ok(());
    }
    if n.as_object().is_none() {
        return Err(SpecError::WrongType(path));
    }
    let mut f = f;
    let s = slot.get_or_insert_with(T::default);
    members(n, path, |k, v| f(s, k, v))
}
