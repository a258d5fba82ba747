//! The service's one error type: every failure a handler can return, each with an HTTP
//! status and a stable machine-readable code.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// The JSON body of every error reply: `{"code": "SOLD_OUT", "message": "..."}`.
///
/// `code` is stable (clients may match on it); `message` is for people and may change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable upper-case code, e.g. `SOLD_OUT`.
    pub code: String,
    /// A human-readable explanation.
    pub message: String,
}

/// What a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request body is not valid JSON or lacks a field (`MALFORMED_JSON`, 400).
    #[error("malformed request body: {0}")]
    MalformedJson(String),
    /// A path segment has the wrong type, e.g. a non-numeric id (`INVALID_PATH`, 400).
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// The phone number is not an 11-digit mainland mobile number (`INVALID_PHONE`, 400).
    #[error("invalid phone number")]
    InvalidPhone,
    /// A field of the request has an unacceptable value (`INVALID_INPUT`, 400).
    #[error("{0}")]
    InvalidInput(String),
    /// No valid `Authorization: Bearer <token>` (`UNAUTHORIZED`, 401).
    #[error("missing, unknown or expired login token")]
    Unauthorized,
    /// No such route (`NOT_FOUND`, 404).
    #[error("no such route")]
    RouteNotFound,
    /// No voucher with this id (`VOUCHER_NOT_FOUND`, 404).
    #[error("voucher not found")]
    VoucherNotFound,
    /// The oversell lab has no variant of this name (`UNKNOWN_VARIANT`, 404).
    #[error("unknown lab variant {0:?}")]
    UnknownVariant(String),
    /// The flash sale has not begun (`NOT_STARTED`, 409).
    #[error("the flash sale has not started")]
    NotStarted,
    /// The flash sale is over (`ENDED`, 409).
    #[error("the flash sale has ended")]
    Ended,
    /// No stock left (`SOLD_OUT`, 409).
    #[error("sold out")]
    SoldOut,
    /// This user already ordered this voucher, or another of their orders is in
    /// progress (`ALREADY_ORDERED`, 409).
    #[error("{0}")]
    AlreadyOrdered(&'static str),
    /// The lab's stock was never set (`STOCK_NOT_SET`, 409).
    #[error("the lab stock is not set; POST /lab/stock first")]
    StockNotSet,
    /// Redis or the database could not be reached (`UNAVAILABLE`, 503).
    #[error("a backing store is unavailable: {0}")]
    Unavailable(String),
    /// Anything else (`INTERNAL`, 500); the details go to the log, not the client.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    /// The stable code clients see.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MalformedJson(_) => "MALFORMED_JSON",
            Self::InvalidPath(_) => "INVALID_PATH",
            Self::InvalidPhone => "INVALID_PHONE",
            Self::InvalidInput(_) => "INVALID_INPUT",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::RouteNotFound => "NOT_FOUND",
            Self::VoucherNotFound => "VOUCHER_NOT_FOUND",
            Self::UnknownVariant(_) => "UNKNOWN_VARIANT",
            Self::NotStarted => "NOT_STARTED",
            Self::Ended => "ENDED",
            Self::SoldOut => "SOLD_OUT",
            Self::AlreadyOrdered(_) => "ALREADY_ORDERED",
            Self::StockNotSet => "STOCK_NOT_SET",
            Self::Unavailable(_) => "UNAVAILABLE",
            Self::Internal(_) => "INTERNAL",
        }
    }

    /// The HTTP status of the reply.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MalformedJson(_)
            | Self::InvalidPath(_)
            | Self::InvalidPhone
            | Self::InvalidInput(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::RouteNotFound | Self::VoucherNotFound | Self::UnknownVariant(_) => {
                StatusCode::NOT_FOUND
            }
            Self::NotStarted
            | Self::Ended
            | Self::SoldOut
            | Self::AlreadyOrdered(_)
            | Self::StockNotSet => StatusCode::CONFLICT,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(e: redis::RedisError) -> Self {
        Self::Unavailable(format!("redis: {e}"))
    }
}

impl From<ferrisson::Error> for ApiError {
    fn from(e: ferrisson::Error) -> Self {
        if e.is_connection_error() {
            Self::Unavailable(format!("redis: {e}"))
        } else {
            Self::Internal(e.into())
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_) => Self::Unavailable(format!("database: {e}")),
            other => Self::Internal(other.into()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = self.code(), error = ?self, "request failed");
        }
        let body = ErrorBody {
            code: self.code().to_owned(),
            message: self.to_string(),
        };
        (status, Json(body)).into_response()
    }
}
