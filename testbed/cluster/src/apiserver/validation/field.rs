//! One invalid field as kube-apiserver reports it: upstream `field.Error` (type, path, value,
//! detail), its message text and the `StatusCause` it becomes.

use serde_json::{Value, json};

/// Upstream `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorType {
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueNotSupported`.
    NotSupported,
    /// `FieldValueTooLong`.
    TooLong,
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// Error type.
    pub(crate) kind: ErrorType,
    /// Field path, e.g. `metadata.name`.
    pub(crate) field: String,
    /// The offending value as Go prints it (`"x"` for strings), for Invalid/NotSupported.
    pub(crate) value: Option<String>,
    /// The explanation.
    pub(crate) detail: String,
}

impl FieldError {
    /// `field: Required value[: detail]`.
    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: ErrorType::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field: Invalid value: "v": detail` for a string value.
    pub(crate) fn invalid(
        field: impl Into<String>,
        value: &str,
        detail: impl Into<String>,
    ) -> Self {
        Self::invalid_raw(field, quote(value), detail)
    }

    /// `field: Invalid value: <v>: detail` with the value already rendered.
    pub(crate) fn invalid_raw(
        field: impl Into<String>,
        value: String,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind: ErrorType::Invalid,
            field: field.into(),
            value: Some(value),
            detail: detail.into(),
        }
    }

    /// `field: Forbidden: detail`.
    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: ErrorType::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field: Too long: may not be more than N bytes` (upstream `field.TooLong`, which does not
    /// print the value).
    pub(crate) fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        Self {
            kind: ErrorType::TooLong,
            field: field.into(),
            value: None,
            detail: format!("may not be more than {max_bytes} bytes"),
        }
    }

    /// `field: Unsupported value: "v": supported values: "a", "b"`.
    pub(crate) fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self {
            kind: ErrorType::NotSupported,
            field: field.into(),
            value: Some(quote(value)),
            detail: format!("supported values: {}", list.join(", ")),
        }
    }

    fn reason(&self) -> &'static str {
        match self.kind {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::TooLong => "FieldValueTooLong",
        }
    }

    /// The message without the field path.
    pub(crate) fn message(&self) -> String {
        let head = match self.kind {
            ErrorType::Required => "Required value".to_owned(),
            ErrorType::Forbidden => "Forbidden".to_owned(),
            ErrorType::TooLong => "Too long".to_owned(),
            ErrorType::Invalid => {
                format!("Invalid value: {}", self.value.as_deref().unwrap_or("null"))
            }
            ErrorType::NotSupported => {
                format!(
                    "Unsupported value: {}",
                    self.value.as_deref().unwrap_or("null")
                )
            }
        };
        if self.detail.is_empty() {
            head
        } else {
            format!("{head}: {}", self.detail)
        }
    }

    /// The `details.causes[]` entry.
    pub(crate) fn cause(&self) -> Value {
        json!({"reason": self.reason(), "message": self.message(), "field": self.field})
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message())
    }
}

/// Go's `%q` for the ASCII names we deal with.
pub(crate) fn quote(s: &str) -> String {
    format!("{s:?}")
}
