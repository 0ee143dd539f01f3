//! RFC 6902 JSON patch with RFC 6901 JSON pointers.
//!
//! kube-apiserver applies JSON patches with evanphx/json-patch and turns every failure while
//! applying into the same generic 422 (fixtures i3, i4), so the detail of a failure only goes to
//! the debug log here; only a body that is not an array of objects is a 400.

use serde_json::{Map, Value};

use super::{PatchError, json_eq, type_name};

/// Applies the operations in `patch` to a copy of `target`, all or nothing.
pub(super) fn apply(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(operations) = patch else {
        return Err(PatchError::Invalid(format!(
            "a JSON patch must be an array of operations, got {}",
            type_name(patch)
        )));
    };
    let operations = operations
        .iter()
        .enumerate()
        .map(|(index, operation)| {
            operation.as_object().ok_or_else(|| {
                PatchError::Invalid(format!("JSON patch operation {index} is not an object"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;

    let mut document = target.clone();
    for (index, operation) in operations.into_iter().enumerate() {
        if let Err(detail) = apply_operation(&mut document, operation) {
            tracing::debug!(operation = index, %detail, "JSON patch rejected");
            return Err(PatchError::Unprocessable);
        }
    }
    Ok(document)
}

/// One operation; the error is a human-readable reason for the debug log.
fn apply_operation(document: &mut Value, operation: &Map<String, Value>) -> Result<(), String> {
    let op = string_member(operation, "op")?;
    let path = parse_pointer(string_member(operation, "path")?)?;
    match op {
        "add" => add(document, &path, value_member(operation)?.clone()),
        "remove" => remove(document, &path).map(drop),
        "replace" => {
            let value = value_member(operation)?.clone();
            *resolve_mut(document, &path)? = value;
            Ok(())
        }
        "move" => {
            let from = parse_pointer(string_member(operation, "from")?)?;
            // RFC 6902 4.4: a value cannot be moved into one of its own children.
            if path.len() > from.len() && path.starts_with(&from) {
                return Err("cannot move a value into one of its children".to_owned());
            }
            let value = remove(document, &from)?;
            add(document, &path, value)
        }
        "copy" => {
            let from = parse_pointer(string_member(operation, "from")?)?;
            let value = resolve(document, &from)?.clone();
            add(document, &path, value)
        }
        "test" => {
            let expected = value_member(operation)?;
            if json_eq(resolve(document, &path)?, expected) {
                Ok(())
            } else {
                Err(format!("test failed at {path:?}"))
            }
        }
        other => Err(format!("unknown operation {other:?}")),
    }
}

fn string_member<'a>(operation: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    operation
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("operation has no string member {name:?}"))
}

/// `value` is required for add, replace and test; an explicit `null` is a value.
fn value_member(operation: &Map<String, Value>) -> Result<&Value, String> {
    operation
        .get("value")
        .ok_or_else(|| "operation has no \"value\" member".to_owned())
}

/// Splits an RFC 6901 pointer into unescaped reference tokens; `""` is the whole document.
fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("JSON pointer {pointer:?} does not start with '/'"));
    };
    rest.split('/').map(unescape_token).collect()
}

/// `~1` is `/` and `~0` is `~`; decoding in one pass gives `~01` = `~1` as RFC 6901 requires.
fn unescape_token(token: &str) -> Result<String, String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(format!("invalid escape in JSON pointer token {token:?}")),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// An array index token: `0` or digits without a leading zero.
fn parse_index(token: &str) -> Result<usize, String> {
    let well_formed = token == "0"
        || (!token.is_empty()
            && !token.starts_with('0')
            && token.bytes().all(|b| b.is_ascii_digit()));
    if !well_formed {
        return Err(format!("invalid array index {token:?}"));
    }
    token
        .parse()
        .map_err(|_| format!("array index {token:?} out of range"))
}

fn resolve<'a>(document: &'a Value, path: &[String]) -> Result<&'a Value, String> {
    path.iter().try_fold(document, |node, token| match node {
        Value::Object(members) => members.get(token).ok_or_else(|| missing(token)),
        Value::Array(items) => items.get(parse_index(token)?).ok_or_else(|| missing(token)),
        _ => Err(missing(token)),
    })
}

fn resolve_mut<'a>(document: &'a mut Value, path: &[String]) -> Result<&'a mut Value, String> {
    path.iter().try_fold(document, |node, token| match node {
        Value::Object(members) => members.get_mut(token).ok_or_else(|| missing(token)),
        Value::Array(items) => {
            let index = parse_index(token)?;
            items.get_mut(index).ok_or_else(|| missing(token))
        }
        _ => Err(missing(token)),
    })
}

fn missing(token: &str) -> String {
    format!("path element {token:?} does not exist")
}

/// RFC 6902 4.1: the parent must exist; `-` appends to an array, an index inserts before it.
fn add(document: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent)) = path.split_last() else {
        *document = value;
        return Ok(());
    };
    match resolve_mut(document, parent)? {
        Value::Object(members) => {
            members.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) if last == "-" => {
            items.push(value);
            Ok(())
        }
        Value::Array(items) => {
            let index = parse_index(last)?;
            if index > items.len() {
                return Err(format!("index {index} is past the end of the array"));
            }
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("cannot add {last:?} to a scalar")),
    }
}

/// RFC 6902 4.2: the target must exist.
fn remove(document: &mut Value, path: &[String]) -> Result<Value, String> {
    let Some((last, parent)) = path.split_last() else {
        return Err("cannot remove the whole document".to_owned());
    };
    match resolve_mut(document, parent)? {
        Value::Object(members) => members.remove(last).ok_or_else(|| missing(last)),
        Value::Array(items) => {
            let index = parse_index(last)?;
            if index < items.len() {
                Ok(items.remove(index))
            } else {
                Err(missing(last))
            }
        }
        _ => Err(missing(last)),
    }
}
