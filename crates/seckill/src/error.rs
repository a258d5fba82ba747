//! The service's one error type: every failure a handler can return, each with an HTTP
//! status and a stable machine-readable code.

use std::time::Duration;

use axum::Json;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
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
    /// The request body is larger than the service accepts (`PAYLOAD_TOO_LARGE`, 413).
    #[error("request body over {0} bytes")]
    PayloadTooLarge(usize),
    /// A request that is not valid HTTP/1.1: a malformed request line or header
    /// (`MALFORMED_REQUEST`, 400; answered by the protocol layer, which then closes the
    /// connection).
    #[error("the request is not valid HTTP/1.1 (a malformed request line or header)")]
    MalformedRequest,
    /// A path and query over [`MAX_URI_BYTES`](crate::http::limits::MAX_URI_BYTES)
    /// (`URI_TOO_LONG`, 414).
    #[error("the request's path and query are over {} KiB", crate::http::limits::MAX_URI_BYTES / 1024)]
    UriTooLong,
    /// A request head (request line and headers) over
    /// [`MAX_HEAD_BYTES`](crate::http::limits::MAX_HEAD_BYTES), or with more than
    /// [`MAX_HEADERS`](crate::http::limits::MAX_HEADERS) headers (`HEADERS_TOO_LARGE`, 431).
    #[error("the request head is over {} KiB", crate::http::limits::MAX_HEAD_BYTES / 1024)]
    HeadersTooLarge,
    /// The body did not arrive within `--read-timeout` (`REQUEST_TIMEOUT`, 408; the
    /// connection is closed).
    #[error("the request body did not arrive within {}", humantime::format_duration(*.0))]
    RequestTimeout(Duration),
    /// A JSON body without `Content-Type: application/json` (`UNSUPPORTED_MEDIA_TYPE`, 415).
    #[error("expected a request with `Content-Type: application/json`")]
    UnsupportedMediaType,
    /// The phone number is not an 11-digit mainland mobile number (`INVALID_PHONE`, 400).
    #[error("invalid phone number")]
    InvalidPhone,
    /// A field of the request has an unacceptable value (`INVALID_INPUT`, 400).
    #[error("{0}")]
    InvalidInput(String),
    /// No valid `Authorization: Bearer <token>` (`UNAUTHORIZED`, 401).
    #[error("missing, unknown or expired login token")]
    Unauthorized,
    /// An admin route without the admin token, or with another one
    /// (`ADMIN_TOKEN_REQUIRED`, 401).
    #[error(
        "this route needs the admin token: send Authorization: Bearer <the token seckill serve was given>"
    )]
    AdminTokenRequired,
    /// An admin route on a service started without an admin token (`ADMIN_DISABLED`,
    /// 403).
    #[error(
        "admin routes are off: start seckill serve with SECKILL_ADMIN_TOKEN (or --admin-token) to turn them on"
    )]
    AdminDisabled,
    /// No such route (`NOT_FOUND`, 404).
    #[error("no such route")]
    RouteNotFound,
    /// The route exists but not with this method (`METHOD_NOT_ALLOWED`, 405; the
    /// `Allow` header lists the methods it has).
    #[error("method not allowed on this route")]
    MethodNotAllowed,
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
    /// The order lock expired before the order was written, and a newer holder of it
    /// has written since: the database refused this stale write (`LOCK_LOST`, 409; try
    /// again).
    #[error("the order lock expired before the order was written; try again")]
    LockLost,
    /// The lab's stock was never set (`STOCK_NOT_SET`, 409).
    #[error("the lab stock is not set; POST /lab/stock first")]
    StockNotSet,
    /// This user made more buy attempts than `--buy-rate` allows (`RATE_LIMITED`, 429,
    /// with `Retry-After` in whole seconds, rounded up).
    #[error("too many buy attempts; retry in {}", humantime::format_duration(*.retry_after))]
    RateLimited {
        /// When the next attempt is allowed.
        retry_after: Duration,
    },
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
            Self::PayloadTooLarge(_) => "PAYLOAD_TOO_LARGE",
            Self::MalformedRequest => "MALFORMED_REQUEST",
            Self::UriTooLong => "URI_TOO_LONG",
            Self::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Self::RequestTimeout(_) => "REQUEST_TIMEOUT",
            Self::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Self::InvalidPhone => "INVALID_PHONE",
            Self::InvalidInput(_) => "INVALID_INPUT",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::AdminTokenRequired => "ADMIN_TOKEN_REQUIRED",
            Self::AdminDisabled => "ADMIN_DISABLED",
            Self::RouteNotFound => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::VoucherNotFound => "VOUCHER_NOT_FOUND",
            Self::UnknownVariant(_) => "UNKNOWN_VARIANT",
            Self::NotStarted => "NOT_STARTED",
            Self::Ended => "ENDED",
            Self::SoldOut => "SOLD_OUT",
            Self::AlreadyOrdered(_) => "ALREADY_ORDERED",
            Self::LockLost => "LOCK_LOST",
            Self::StockNotSet => "STOCK_NOT_SET",
            Self::RateLimited { .. } => "RATE_LIMITED",
            Self::Unavailable(_) => "UNAVAILABLE",
            Self::Internal(_) => "INTERNAL",
        }
    }

    /// The HTTP status of the reply.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MalformedJson(_)
            | Self::MalformedRequest
            | Self::InvalidPath(_)
            | Self::InvalidPhone
            | Self::InvalidInput(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UriTooLong => StatusCode::URI_TOO_LONG,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unauthorized | Self::AdminTokenRequired => StatusCode::UNAUTHORIZED,
            Self::AdminDisabled => StatusCode::FORBIDDEN,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RouteNotFound | Self::VoucherNotFound | Self::UnknownVariant(_) => {
                StatusCode::NOT_FOUND
            }
            Self::NotStarted
            | Self::Ended
            | Self::SoldOut
            | Self::AlreadyOrdered(_)
            | Self::LockLost
            | Self::StockNotSet => StatusCode::CONFLICT,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(e: redis::RedisError) -> Self {
        Self::Unavailable(format!("redis: {}", one_line(&e)))
    }
}

impl From<ferrisson::redis::Error> for ApiError {
    fn from(e: ferrisson::redis::Error) -> Self {
        if e.is_connection_error() {
            Self::Unavailable(format!("redis: {}", one_line(&e)))
        } else {
            Self::Internal(e.into())
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut => Self::Unavailable(
                "database: no connection became free, or none could be opened, within --db-timeout"
                    .into(),
            ),
            sqlx::Error::Io(_) | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => {
                Self::Unavailable(format!("database: {}", one_line(&e)))
            }
            other => Self::Internal(other.into()),
        }
    }
}

/// An error and its causes on one line, `outer: inner: ...`, leaving out a cause whose
/// text the message before it already ends with (many errors repeat their source).
///
/// ```
/// use seckill::error::one_line;
///
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// assert_eq!(one_line(&io), "connection refused");
/// ```
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let message = cause.to_string();
        if !line.ends_with(&message) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&message);
        }
        next = cause.source();
    }
    line
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = self.code(), error = %one_line(&self), "request failed");
        }
        let body = ErrorBody {
            code: self.code().to_owned(),
            message: self.to_string(),
        };
        let mut response = (status, Json(body)).into_response();
        if let Self::RateLimited { retry_after } = self {
            // Whole seconds (RFC 9110), rounded up: a client that waits this long is
            // allowed.
            let seconds = retry_after.as_micros().div_ceil(1_000_000).max(1);
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds as u64));
        }
        response
    }
}
