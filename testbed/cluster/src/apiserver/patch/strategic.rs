//! Strategic merge patch: the "apply" half of k8s.io/apimachinery `pkg/util/strategicpatch`
//! (`StrategicMergeMapPatch` with `MergeParallelList` and `IgnoreUnmatchedNulls`, which is what
//! kube-apiserver uses), re-implemented on `serde_json::Value`.
//!
//! Behaviour worth knowing, all as in apimachinery:
//! - maps merge key by key and `null` deletes; a value for a key the object lacks is taken with
//!   its nested `null`s and `$patch` maps dropped;
//! - a list with `patchStrategy:"merge"` (see [`super::schema`]) is a set union for scalars and a
//!   merge by key for objects; every other list is replaced;
//! - order: items named by the patch keep the patch's relative order, server-only items keep
//!   theirs, and a NEW item goes before the server items it is compared with, so
//!   `{"metadata":{"finalizers":["new"]}}` on `[a, b]` gives `[new, a, b]` (fixture i5);
//!   `$setElementOrder/<list>` overrides the patch order;
//! - a merge list in the patch that is empty (`"finalizers": []`) changes nothing; clearing
//!   needs `null`, `$patch: replace` or `$deleteFromPrimitiveList`;
//! - directives: `$patch: replace|delete` in maps and list items, `$retainKeys`,
//!   `$deleteFromPrimitiveList/<list>` and `$setElementOrder/<list>`.
//!
//! Malformed directives and lists that break the merge rules (an item without its merge key,
//! mixed element types) are [`PatchError::Invalid`]; kube-apiserver answers 400 for most of these
//! and 500 for a few, which nothing here needs to reproduce. One leniency: `$setElementOrder`
//! for a list that is empty both in the object and in the patch is a no-op, where apimachinery
//! fails with "no elements in any of the given slices".

use serde_json::{Map, Value};

use super::schema::{self, ListMerge};
use super::{PatchError, json_eq, type_name};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

type Object = Map<String, Value>;
type Result<T, E = PatchError> = std::result::Result<T, E>;

/// Applies a strategic merge patch body (already parsed) to an object of `kind`.
pub(super) fn apply(kind: &str, target: &Value, patch: Value) -> Result<Value> {
    let Value::Object(patch) = patch else {
        return Err(invalid(format!(
            "a strategic merge patch must be a JSON object, got {}",
            type_name(&patch)
        )));
    };
    let Value::Object(original) = target.clone() else {
        return Err(invalid("the stored object is not a JSON object"));
    };
    let mut merged = Value::Object(Merger { kind }.merge_map(original, patch, "")?);
    // The real server decodes the result into the typed object, which drops directive keys
    // that ended up in values taken from the patch as they were (replaced lists, new items).
    strip_directive_keys(&mut merged);
    Ok(merged)
}

fn invalid(message: impl Into<String>) -> PatchError {
    PatchError::Invalid(message.into())
}

/// Walks one object, knowing its Kind for the merge-key lookups.
struct Merger<'a> {
    kind: &'a str,
}

/// Element type of the lists being merged (apimachinery `sliceElementType`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elements {
    Scalars,
    Objects,
}

impl Merger<'_> {
    /// apimachinery `mergeMap`.
    fn merge_map(&self, mut original: Object, mut patch: Object, path: &str) -> Result<Object> {
        if let Some(directive) = patch.remove(DIRECTIVE) {
            return match directive.as_str() {
                Some("replace") => Ok(patch),
                Some("delete") => Ok(Object::new()),
                _ => Err(invalid(format!(
                    "unknown {DIRECTIVE} directive {directive} in a map"
                ))),
            };
        }
        retain_keys(&mut original, &mut patch)?;
        self.set_element_order(&mut original, &mut patch, path)?;

        for (key, patch_value) in patch {
            let (key, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
                Some(rest) => (
                    directive_field(rest, DELETE_FROM_PRIMITIVE_LIST)?.to_owned(),
                    true,
                ),
                None => (key, false),
            };
            // IgnoreUnmatchedNulls: null deletes (even under a delete-list key, as upstream).
            if patch_value.is_null() {
                original.remove(&key);
                continue;
            }
            let child = child_path(path, &key);
            let current = original.remove(&key);
            if let Some(value) = self.merge_field(current, patch_value, delete_list, &child)? {
                original.insert(key, value);
            }
        }
        Ok(original)
    }

    /// The new value of one field, `None` when the field ends up absent.
    fn merge_field(
        &self,
        current: Option<Value>,
        patch: Value,
        delete_list: bool,
        path: &str,
    ) -> Result<Option<Value>> {
        Ok(match (current, patch) {
            (None, _) if delete_list => None,
            (Some(Value::Object(current)), Value::Object(patch)) => {
                Some(Value::Object(self.merge_map(current, patch, path)?))
            }
            (Some(Value::Array(current)), Value::Array(patch)) => Some(Value::Array(
                self.merge_list(current, patch, path, delete_list)?,
            )),
            (Some(current), patch) if same_type(&current, &patch) => Some(patch),
            (Some(current), _) if delete_list => Some(current),
            // Missing field, or a value of another type: take the patch value.
            (_, patch) => cleaned(patch),
        })
    }

    /// apimachinery `mergeSliceHandler`: merge lists merge, all others are replaced.
    fn merge_list(
        &self,
        current: Vec<Value>,
        patch: Vec<Value>,
        path: &str,
        delete_list: bool,
    ) -> Result<Vec<Value>> {
        match schema::list_merge(self.kind, path) {
            Some(strategy) => {
                self.merge_slice(current, patch, strategy.merge_key(), delete_list, path)
            }
            None => Ok(patch),
        }
    }

    /// apimachinery `mergeSlice`.
    fn merge_slice(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        merge_key: Option<&str>,
        delete_list: bool,
        path: &str,
    ) -> Result<Vec<Value>> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        match element_kind(&original, &patch)? {
            Elements::Scalars => {
                if delete_list {
                    return Ok(original
                        .into_iter()
                        .filter(|item| !patch.iter().any(|gone| json_eq(item, gone)))
                        .collect());
                }
                let merged = deduplicate(original.iter().chain(&patch).cloned());
                let (patch_items, server_only) = partition(merged, &patch, None)?;
                normalize_element_order(patch_items, server_only, &patch, &original, None)
            }
            Elements::Objects => {
                let key = merge_key.ok_or_else(|| {
                    invalid(format!(
                        "cannot merge lists of objects without a merge key at {path}"
                    ))
                })?;
                let (original, patch) = merge_special_elements(original, patch, key)?;
                let merged = self.merge_by_key(original.clone(), patch.clone(), key, path)?;
                let (patch_items, server_only) = partition(merged, &patch, Some(key))?;
                normalize_element_order(patch_items, server_only, &patch, &original, Some(key))
            }
        }
    }

    /// apimachinery `mergeSliceWithoutSpecialElements`: items with a known key merge into the
    /// existing item, the others are appended (ordering happens afterwards).
    fn merge_by_key(
        &self,
        mut merged: Vec<Value>,
        patch: Vec<Value>,
        key: &str,
        path: &str,
    ) -> Result<Vec<Value>> {
        for item in patch {
            let Value::Object(item) = item else {
                return Err(invalid(format!("list item at {path} is not an object")));
            };
            let value = item.get(key).cloned().ok_or_else(|| no_merge_key(key))?;
            match merged
                .iter()
                .position(|existing| key_matches(existing, key, &value))
            {
                Some(index) => {
                    let Value::Object(existing) = std::mem::take(&mut merged[index]) else {
                        return Err(invalid(format!("list item at {path} is not an object")));
                    };
                    merged[index] = Value::Object(self.merge_map(existing, item, path)?);
                }
                None => merged.push(Value::Object(item)),
            }
        }
        Ok(merged)
    }

    /// apimachinery `mergePatchIntoOriginal`: handles every `$setElementOrder/<list>` of this
    /// map together with the patch list it orders, and removes both from `patch`.
    fn set_element_order(
        &self,
        original: &mut Object,
        patch: &mut Object,
        path: &str,
    ) -> Result<()> {
        let directives: Vec<String> = patch
            .keys()
            .filter(|key| key.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for directive in directives {
            let Some(Value::Array(order)) = patch.remove(&directive) else {
                return Err(invalid(format!("{directive} must be a list")));
            };
            let field = directive_field(&directive[SET_ELEMENT_ORDER.len()..], SET_ELEMENT_ORDER)?;
            let current = match original.get(field) {
                None => None,
                Some(Value::Array(items)) => Some(items.clone()),
                Some(_) => return Err(invalid(format!("{field} is not a list"))),
            };
            let patched = match patch.remove(field) {
                None => None,
                Some(Value::Array(items)) => Some(items),
                Some(_) => return Err(invalid(format!("{field} in the patch is not a list"))),
            };
            let child = child_path(path, field);
            let merge_key = schema::list_merge(self.kind, &child).and_then(ListMerge::merge_key);
            validate_against_order(patched.as_deref().unwrap_or_default(), &order, merge_key)?;

            let server_order = current.clone().unwrap_or_default();
            let no_elements = server_order.is_empty() && patched.as_ref().is_none_or(Vec::is_empty);
            let kind = if no_elements {
                None
            } else {
                Some(element_kind(
                    &server_order,
                    patched.as_deref().unwrap_or_default(),
                )?)
            };
            let merged = match (current, patched) {
                (Some(current), None) => current,
                (None, Some(patched)) => without_directives_in_list(patched),
                (Some(current), Some(patched)) => {
                    self.merge_list(current, patched, &child, false)?
                }
                (None, None) => continue,
            };
            let ordered = match kind {
                None => merged,
                Some(kind) => {
                    let key = if kind == Elements::Objects {
                        merge_key
                    } else {
                        None
                    };
                    let (in_order, server_only) = partition(merged, &order, key)?;
                    normalize_element_order(in_order, server_only, &order, &server_order, key)?
                }
            };
            original.insert(field.to_owned(), Value::Array(ordered));
        }
        Ok(())
    }
}

/// apimachinery `applyRetainKeysDirective`: drops the fields of `original` that the directive
/// does not list, after checking the patch only sets listed fields.
fn retain_keys(original: &mut Object, patch: &mut Object) -> Result<()> {
    let Some(retained) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retained) = retained else {
        return Err(invalid(format!("{RETAIN_KEYS} must be a list")));
    };
    let is_retained = |key: &str| retained.iter().any(|name| name.as_str() == Some(key));
    let unlisted = patch.iter().find(|(key, value)| {
        !value.is_null()
            && !key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !key.starts_with(SET_ELEMENT_ORDER)
            && !is_retained(key)
    });
    if let Some((key, _)) = unlisted {
        return Err(invalid(format!(
            "{key} is set by the patch but not in {RETAIN_KEYS}"
        )));
    }
    original.retain(|key, _| is_retained(key));
    Ok(())
}

/// apimachinery `validatePatchWithSetOrderList`: the patch list must be a subsequence of the
/// `$setElementOrder` list (items deleted with `$patch: delete` aside).
fn validate_against_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let candidates: Vec<&Value> = match key {
        Some(_) => {
            if patch.iter().any(|item| !item.is_object()) {
                return Err(invalid("merge list items must be objects"));
            }
            patch
                .iter()
                .filter(|item| !is_delete_directive(item))
                .collect()
        }
        None => patch.iter().collect(),
    };
    let (mut in_patch, mut in_order) = (0, 0);
    while in_patch < candidates.len() && in_order < order.len() {
        if has_directive(candidates[in_patch]) {
            in_patch += 1;
            continue;
        }
        if merge_key_value_equal(candidates[in_patch], &order[in_order], key)? {
            in_patch += 1;
        }
        in_order += 1;
    }
    if in_patch < candidates.len() {
        return Err(invalid(format!(
            "the order of the patch list does not match its {SET_ELEMENT_ORDER} list"
        )));
    }
    Ok(())
}

fn merge_key_value_equal(left: &Value, right: &Value, key: Option<&str>) -> Result<bool> {
    let Some(key) = key else {
        return Ok(json_eq(left, right));
    };
    match (left.get(key), right.get(key)) {
        (Some(left), Some(right)) => Ok(json_eq(left, right)),
        _ => Err(no_merge_key(key)),
    }
}

/// apimachinery `mergeSliceWithSpecialElements`: applies `$patch: delete` items (remove by
/// merge key) and `$patch: replace` (the plain patch items become the whole list), returning
/// the updated original and the patch items without directives.
fn merge_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        match item.get(DIRECTIVE) {
            None => plain.push(item),
            Some(directive) => match directive.as_str() {
                Some("delete") => {
                    let value = item.get(key).ok_or_else(|| no_merge_key(key))?;
                    original.retain(|existing| !key_matches(existing, key, value));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(invalid(
                        "merging lists cannot yet be specified in the patch",
                    ));
                }
                _ => {
                    return Err(invalid(format!(
                        "unknown {DIRECTIVE} directive {directive} in a list"
                    )));
                }
            },
        }
    }
    Ok(if replace {
        (plain, Vec::new())
    } else {
        (original, plain)
    })
}

/// Splits `merged` into the items present in `by` and the others (apimachinery
/// `partitionPrimitivesByPresentInList` / `partitionMapsByPresentInList`).
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    key: Option<&str>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut present = Vec::with_capacity(merged.len());
    let mut absent = Vec::with_capacity(merged.len());
    for item in merged {
        let found = match key {
            None => by.iter().any(|other| json_eq(other, &item)),
            Some(key) => {
                let value = item.get(key).ok_or_else(|| no_merge_key(key))?;
                by.iter().any(|other| key_matches(other, key, value))
            }
        };
        if found {
            present.push(item);
        } else {
            absent.push(item);
        }
    }
    Ok((present, absent))
}

/// apimachinery `normalizeElementOrder`: sorts the patch items by `patch_order` and the
/// server-only items by `server_order`, then interleaves them.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>> {
    let patch_items = sort_by_order(patch_items, patch_order, key)?;
    let server_only = sort_by_order(server_only, server_order, key)?;
    Ok(interleave(server_only, patch_items, server_order, key))
}

/// apimachinery `normalizeSliceOrder`: stable sort by position in `order`; items carrying
/// `$patch: delete` go last. (Items missing from `order` cannot occur on the paths that call
/// this; they sort last instead of upstream's ill-defined comparator result.)
fn sort_by_order(items: Vec<Value>, order: &[Value], key: Option<&str>) -> Result<Vec<Value>> {
    let (mut kept, deleted): (Vec<Value>, Vec<Value>) = match key {
        Some(key) => {
            if let Some(bad) = items
                .iter()
                .chain(order)
                .find(|item| item.get(key).is_none())
            {
                return Err(invalid(format!("list item {bad} has no merge key {key:?}")));
            }
            items
                .into_iter()
                .partition(|item| !is_delete_directive(item))
        }
        None => (items, Vec::new()),
    };
    kept.sort_by_key(|item| position(order, item, key).unwrap_or(usize::MAX));
    kept.extend(deleted);
    Ok(kept)
}

/// apimachinery `mergeSortedSlice`: merges two sorted lists, taking the server item first only
/// when both items are in `server_order` and the server item comes first there; so a patch
/// item the server has never seen goes before the remaining server items.
fn interleave(
    server_only: Vec<Value>,
    patch_items: Vec<Value>,
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(server_only.len() + patch_items.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = patch_items.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    position(server_order, l, key),
                    position(server_order, r, key),
                ) {
                    (Some(l), Some(r)) => l < r,
                    _ => false,
                }
            }
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

/// apimachinery `index`: position of `item` in `list`, by merge key value or by value.
fn position(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    list.iter().position(|candidate| match key {
        None => json_eq(candidate, item),
        Some(key) => match (candidate.get(key), item.get(key)) {
            (Some(a), Some(b)) => json_eq(a, b),
            (None, None) => true,
            _ => false,
        },
    })
}

fn element_kind(original: &[Value], patch: &[Value]) -> Result<Elements> {
    let mut items = original.iter().chain(patch);
    let Some(first) = items.next() else {
        return Err(invalid("no elements in any of the given lists"));
    };
    if first.is_array() {
        return Err(invalid("lists of lists are not supported"));
    }
    if items.any(|item| !same_type(first, item)) {
        return Err(invalid("list element types are not identical"));
    }
    Ok(if first.is_object() {
        Elements::Objects
    } else {
        Elements::Scalars
    })
}

fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn key_matches(item: &Value, key: &str, value: &Value) -> bool {
    item.get(key).is_some_and(|own| json_eq(own, value))
}

fn has_directive(item: &Value) -> bool {
    item.get(DIRECTIVE).is_some()
}

fn is_delete_directive(item: &Value) -> bool {
    item.get(DIRECTIVE).and_then(Value::as_str) == Some("delete")
}

fn no_merge_key(key: &str) -> PatchError {
    invalid(format!("list item does not contain the merge key {key:?}"))
}

/// The list name after `$directive/`.
fn directive_field<'a>(rest: &'a str, directive: &str) -> Result<&'a str> {
    rest.strip_prefix('/')
        .ok_or_else(|| invalid(format!("{directive} must be followed by /<list name>")))
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn deduplicate(items: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for item in items {
        if !out.iter().any(|seen| json_eq(seen, &item)) {
            out.push(item);
        }
    }
    out
}

/// A patch value stored where the object had nothing (or a value of another type): upstream
/// `discardNullValuesFromPatch` then `removeDirectives`. `None` when the value itself is a
/// `$patch` map.
fn cleaned(value: Value) -> Option<Value> {
    without_directives(discard_nulls(value))
}

fn discard_nulls(value: Value) -> Value {
    match value {
        Value::Object(members) => Value::Object(
            members
                .into_iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(key, value)| (key, discard_nulls(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(discard_nulls).collect()),
        other => other,
    }
}

/// Upstream `removeDirectives`: maps carrying `$patch` disappear, recursively.
fn without_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(members) if members.contains_key(DIRECTIVE) => None,
        Value::Object(members) => Some(Value::Object(
            members
                .into_iter()
                .filter_map(|(key, value)| without_directives(value).map(|value| (key, value)))
                .collect(),
        )),
        Value::Array(items) => Some(Value::Array(without_directives_in_list(items))),
        other => Some(other),
    }
}

fn without_directives_in_list(items: Vec<Value>) -> Vec<Value> {
    items.into_iter().filter_map(without_directives).collect()
}

/// Removes SMP directive keys anywhere in `value`.
fn strip_directive_keys(value: &mut Value) {
    match value {
        Value::Object(members) => {
            members.retain(|key, _| {
                key != DIRECTIVE
                    && key != RETAIN_KEYS
                    && !key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
                    && !key.starts_with(SET_ELEMENT_ORDER)
            });
            members.values_mut().for_each(strip_directive_keys);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_directive_keys),
        _ => {}
    }
}
