//! Reading specs: JSON from a file (or the embedded default), `--set path=value` overrides, and
//! errors that name the file, the field and what is allowed.

use crate::spec::{FieldError, Spec};
use serde_json::Value;
use std::path::Path;

/// A spec that could not be read, with where and why.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct SpecError {
    /// The file (or `<embedded default>`, `--set`).
    pub source_name: String,
    /// What is wrong, with the field's path.
    pub message: String,
}

impl SpecError {
    fn new(source_name: &str, message: impl Into<String>) -> Self {
        SpecError { source_name: source_name.to_string(), message: message.into() }
    }
}

/// Sets `path` (dotted; numbers index arrays) in `root` to `value`, creating objects as needed.
pub fn set_path(root: &mut Value, path: &str, value: Value) -> Result<(), FieldError> {
    let bad = |problem: String| FieldError { field: path.into(), problem };
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad("is not a field path (use names separated by dots, e.g. network.latency_us)".into()));
    }
    let mut cur = root;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if cur.is_null() {
            *cur = Value::Object(Default::default());
        }
        cur = match cur {
            Value::Array(items) => {
                let len = items.len();
                let k: usize = part.parse().map_err(|_| bad(format!("`{part}` is not an index into a list")))?;
                let slot = items.get_mut(k).ok_or_else(|| bad(format!("index {k} is past the end ({len} items)")))?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                slot
            }
            Value::Object(map) => {
                if last {
                    map.insert(part.to_string(), value);
                    return Ok(());
                }
                map.entry(part.to_string()).or_insert(Value::Null)
            }
            _ => return Err(bad(format!("`{}` is not an object", parts[..i].join(".")))),
        };
    }
    Ok(())
}

/// Sets `path` in the spec `root` to `value` (a `--set`, or a sweep's grid key). An object on the
/// way that the spec leaves to its default is first written out as that default, as `dsgd check`
/// shows it, so that `algorithm.collective=tree` on a spec without `algorithm` changes the default
/// algorithm's collective instead of making an algorithm of that one field. A path ending in
/// `kind` chooses another variant of its object, so that object is not filled with the default
/// variant's fields (`algorithm.kind=gossip` gives gossip with its own defaults).
pub fn set_spec_path(root: &mut Value, path: &str, value: Value) -> Result<(), FieldError> {
    let parts: Vec<&str> = path.split('.').collect();
    let objects = parts.len() - 1 - usize::from(parts.len() > 1 && parts[parts.len() - 1] == "kind");
    if objects > 0 && root.is_object() && missing_object(root, &parts[..objects]) {
        if let Ok(spec) = deserialize_spec(root.clone()) {
            let resolved = serde_json::to_value(&spec).expect("plain data serialises");
            fill_defaults(root, &resolved, &parts[..objects]);
        }
    }
    set_path(root, path, value)
}

/// True if an object on `prefix` is absent (or null) in `root`: only then is there a default to
/// write out.
fn missing_object(root: &Value, prefix: &[&str]) -> bool {
    let mut cur = root;
    for key in prefix {
        match cur.get(*key) {
            None | Some(Value::Null) => return true,
            Some(next) => cur = next,
        }
    }
    false
}

/// Walks `prefix` down `root` and `resolved` together; the first object missing (or null) in
/// `root` is copied from `resolved`, with all that is under it.
fn fill_defaults(root: &mut Value, resolved: &Value, prefix: &[&str]) {
    let (Some((key, rest)), Value::Object(map)) = (prefix.split_first(), root) else { return };
    let Some(default) = resolved.get(*key).filter(|d| d.is_object()) else { return };
    match map.get_mut(*key) {
        None | Some(Value::Null) => {
            map.insert(key.to_string(), default.clone());
        }
        Some(inner) => fill_defaults(inner, default, rest),
    }
}

/// Parses `field=value`; the value is JSON if it parses as JSON, else a string.
pub fn parse_assignment(s: &str) -> Result<(String, Value), FieldError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| FieldError { field: s.into(), problem: "is not of the form path.to.field=value".into() })?;
    let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
    Ok((k.trim().to_string(), value))
}

/// Checks that no object in the JSON `text` gives a key twice (serde would keep the last one
/// silently); the first duplicate is named by its path.
pub fn no_duplicate_keys(text: &str) -> Result<(), serde_json::Error> {
    use serde::de::{DeserializeSeed, Error, MapAccess, SeqAccess, Visitor};
    struct Walk(String);
    impl<'de> DeserializeSeed<'de> for Walk {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
            let mut seen = std::collections::BTreeSet::new();
            while let Some(k) = m.next_key::<String>()? {
                let path = if self.0.is_empty() { k.clone() } else { format!("{}.{k}", self.0) };
                if !seen.insert(k) {
                    return Err(A::Error::custom(format!("field `{path}` is given twice (give each field once)")));
                }
                m.next_value_seed(Walk(path))?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
            let mut i = 0;
            while s.next_element_seed(Walk(format!("{}[{i}]", self.0)))?.is_some() {
                i += 1;
            }
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let mut d = serde_json::Deserializer::from_str(text);
    Walk(String::new()).deserialize(&mut d)
}

/// The value at a path as serde_path_to_error prints it (`faults[2].at_s`), if any.
fn at_path<'a>(v: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut cur = v;
    for part in path.split('.').filter(|p| !p.is_empty() && *p != ".") {
        let (name, rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if !name.is_empty() {
            cur = cur.get_mut(name)?;
        }
        for idx in rest.split('[').filter(|x| !x.is_empty()) {
            cur = cur.get_mut(idx.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(cur)
}

/// Refuses a list where the spec has an object (serde would read `{"stop": [5]}` as a struct
/// from its fields in order): `given` is the input, `back` the spec serialised again.
fn same_containers(given: &Value, back: &Value, path: &str) -> Result<(), FieldError> {
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    match (given, back) {
        (Value::Array(_), Value::Object(_)) => Err(FieldError {
            field: path.into(),
            problem: "expected an object ({\"field\": value, ...}), found a list".into(),
        }),
        (Value::Object(g), Value::Object(b)) => {
            // A tagged variant without fields (`{"kind": "flat"}`) takes no other field, but
            // serde ignores them there: refuse them here.
            if let (Some(kind), true) = (g.get("kind"), b.len() == 1 && b.contains_key("kind")) {
                if let Some(k) = g.keys().find(|k| *k != "kind") {
                    let problem = format!("unknown field `{k}`; kind {kind} takes no other field");
                    return Err(FieldError { field: join(k).into(), problem });
                }
            }
            for (k, v) in g {
                if let Some(w) = b.get(k) {
                    same_containers(v, w, &join(k))?;
                }
            }
            Ok(())
        }
        (Value::Array(g), Value::Array(b)) => {
            for (i, (v, w)) in g.iter().zip(b).enumerate() {
                same_containers(v, w, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn deserialize_spec(value: Value) -> Result<Spec, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        (path, inner.split(" at line ").next().unwrap_or(&inner).to_string())
    })
}

/// An error inside a tagged object (`{"kind": ...}`) is reported by serde at the object itself;
/// this finds the field: the one named by the message, or the one whose removal changes the error.
fn refine(value: &Value, path: String, message: &str) -> String {
    let mut probe = value.clone();
    let Some(Value::Object(obj)) = at_path(&mut probe, &path) else { return path };
    if !obj.contains_key("kind") {
        return path;
    }
    let join = |k: &str| if path == "." || path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    // A tagged object inside this one (`workload.partition`) is reported at this one: find the
    // child whose kind or field the message names.
    let quoted = |prefix: &str| message.strip_prefix(prefix).and_then(|r| r.split('`').next()).map(str::to_string);
    let child = |pick: &dyn Fn(&serde_json::Map<String, Value>) -> bool| {
        obj.iter().find_map(|(k, v)| match v {
            Value::Object(o) if o.contains_key("kind") && pick(o) => Some(k.clone()),
            _ => None,
        })
    };
    if let Some(variant) = quoted("unknown variant `") {
        let own = obj.get("kind").and_then(Value::as_str) == Some(variant.as_str());
        // Or a field of this object whose value is the unknown variant (`mode`, `staleness_lr`).
        let field = obj.iter().find(|(k, v)| *k != "kind" && v.as_str() == Some(variant.as_str())).map(|(k, _)| k);
        return match (child(&|o| o.get("kind").and_then(Value::as_str) == Some(variant.as_str())), field) {
            (Some(c), _) if !own => join(&format!("{c}.kind")),
            (None, Some(f)) if !own => join(f),
            _ => join("kind"),
        };
    }
    if let Some(f) = quoted("unknown field `") {
        return match child(&|o| o.contains_key(&f)) {
            Some(c) if !obj.contains_key(&f) => join(&format!("{c}.{f}")),
            _ => join(&f),
        };
    }
    let keys: Vec<String> = obj.keys().filter(|k| *k != "kind").cloned().collect();
    for k in keys {
        let mut v = value.clone();
        if let Some(Value::Object(o)) = at_path(&mut v, &path) {
            o.remove(&k);
        }
        match deserialize_spec(v) {
            Err((p, m)) if p == path && m == message => continue,
            _ => return join(&k),
        }
    }
    path
}

/// Builds a validated spec from JSON text plus overrides.
pub fn spec_from_str(source_name: &str, text: &str, sets: &[String]) -> Result<Spec, SpecError> {
    let mut value: Value =
        serde_json::from_str(text).map_err(|e| SpecError::new(source_name, format!("not valid JSON: {e}")))?;
    no_duplicate_keys(text).map_err(|e| SpecError::new(source_name, e.to_string()))?;
    if !value.is_object() {
        return Err(SpecError::new(source_name, "a spec must be a JSON object"));
    }
    for s in sets {
        let (k, v) = parse_assignment(s).map_err(|e| SpecError::new("--set", e.to_string()))?;
        set_spec_path(&mut value, &k, v).map_err(|e| SpecError::new("--set", e.to_string()))?;
    }
    spec_from_value(source_name, value)
}

/// Builds a validated spec from a JSON value a user wrote: fields added since the first release
/// get their default for new specs (`network.transport`: reliable).
pub fn spec_from_value(source_name: &str, value: Value) -> Result<Spec, SpecError> {
    let mut spec = recorded_spec(source_name, value)?;
    if spec.network.transport.is_none() {
        spec.network.transport = Some(crate::spec::TransportSpec::Reliable);
    }
    Ok(spec)
}

/// Reads the resolved `spec.json` of a run folder: a field it lacks means the behaviour it was
/// recorded with (no `network.transport`: datagram).
pub fn spec_from_record(source_name: &str, text: &str) -> Result<Spec, SpecError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| SpecError::new(source_name, format!("not valid JSON: {e}")))?;
    recorded_spec(source_name, value)
}

fn recorded_spec(source_name: &str, value: Value) -> Result<Spec, SpecError> {
    let spec: Spec = deserialize_spec(value.clone()).map_err(|(path, inner)| {
        let path = refine(&value, path, &inner);
        if path == "." {
            SpecError::new(source_name, inner)
        } else {
            SpecError::new(source_name, format!("field `{path}`: {inner}"))
        }
    })?;
    same_containers(&value, &serde_json::to_value(&spec).expect("plain data serialises"), "")
        .map_err(|e| SpecError::new(source_name, e.to_string()))?;
    spec.validate()
        .map_err(|FieldError { field, problem }| SpecError::new(source_name, format!("field `{field}`: {problem}")))?;
    Ok(spec)
}

/// Reads and validates a spec file.
pub fn spec_from_file(path: &Path, sets: &[String]) -> Result<Spec, SpecError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SpecError::new(&name, format!("cannot read: {e}")))?;
    spec_from_str(&name, &text, sets)
}
