//! Unit tests of the layer against a scripted inner service (no sockets): every path that ends
//! a call records exactly one observation with the right code.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;

use http_body_util::StreamBody;
use prost::Message as _;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::identity_client::IdentityClient;
use proto::csi::v1::{
    ControllerGetCapabilitiesRequest, CreateVolumeRequest, CreateVolumeResponse, ProbeRequest,
    ProbeResponse, Volume,
};

use super::*;
use crate::metrics::ProcessMetrics;

const PROBE: &str = "/csi.v1.Identity/Probe";
const CREATE_VOLUME: &str = "/csi.v1.Controller/CreateVolume";

/// What the scripted inner service answers.
#[derive(Clone)]
enum Reply {
    /// HTTP 200, one message, trailers with this code.
    Message(Bytes, Code),
    /// Trailers-only response with this code.
    TrailersOnly(Code, &'static str),
    /// Answer after this long (paused clock).
    Delayed(Duration, Box<Reply>),
    /// Headers, then a body that never ends.
    StalledBody,
    /// A transport error without a gRPC status.
    TransportError,
}

/// Requests the scripted service saw: path and headers.
type Seen = Arc<Mutex<Vec<(String, HeaderMap)>>>;

type ScriptedFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, BoxError>> + Send>>;

fn scripted(
    reply: Reply,
) -> (
    impl Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = BoxError,
        Future = ScriptedFuture,
    > + Clone
    + Send
    + 'static,
    Seen,
) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let service = tower::service_fn(move |request: http::Request<Body>| {
        log.lock()
            .unwrap()
            .push((request.uri().path().to_owned(), request.headers().clone()));
        let reply = reply.clone();
        Box::pin(respond(reply)) as ScriptedFuture
    });
    (service, seen)
}

async fn respond(mut reply: Reply) -> Result<http::Response<Body>, BoxError> {
    while let Reply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    let grpc = |builder: http::response::Builder| {
        builder
            .status(200)
            .header("content-type", "application/grpc")
    };
    Ok(match reply {
        Reply::Message(message, code) => {
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from(code as i32));
            let frames = vec![
                Ok::<_, Infallible>(Frame::data(framed(&message))),
                Ok(Frame::trailers(trailers)),
            ];
            grpc(http::Response::builder())
                .body(Body::new(StreamBody::new(futures::stream::iter(frames))))
                .unwrap()
        }
        Reply::TrailersOnly(code, message) => grpc(http::Response::builder())
            .header("grpc-status", code as i32)
            .header("grpc-message", message)
            .body(Body::empty())
            .unwrap(),
        Reply::StalledBody => {
            let frames = futures::stream::pending::<Result<Frame<Bytes>, Infallible>>();
            grpc(http::Response::builder())
                .body(Body::new(StreamBody::new(frames)))
                .unwrap()
        }
        Reply::TransportError => return Err("connection reset by peer".into()),
        Reply::Delayed(..) => unreachable!("unwrapped above"),
    })
}

fn framed(message: &[u8]) -> Bytes {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

fn probe_reply(ready: Option<bool>) -> Reply {
    Reply::Message(ProbeResponse { ready }.encode_to_vec().into(), Code::Ok)
}

fn metrics() -> CsiMetrics {
    CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap()
}

/// `csi_sidecar_operations_seconds_count` for one method and code, if the series exists.
fn count(metrics: &CsiMetrics, method: &str, code: &str) -> Option<u64> {
    let text = metrics.render().unwrap();
    let method = format!("method_name=\"{method}\"");
    let code = format!("grpc_status_code=\"{code}\"");
    text.lines()
        .filter(|line| line.starts_with("csi_sidecar_operations_seconds_count{"))
        .find(|line| line.contains(&method) && line.contains(&code))
        .map(|line| line.rsplit(' ').next().unwrap().parse().unwrap())
}

/// Every `(method, code)` series with its count.
fn all_counts(metrics: &CsiMetrics) -> Vec<String> {
    let text = metrics.render().unwrap();
    text.lines()
        .filter(|line| line.starts_with("csi_sidecar_operations_seconds_count{"))
        .map(ToOwned::to_owned)
        .collect()
}

fn layer(
    metrics: &CsiMetrics,
    call_timeout: Option<Duration>,
    logging: CallLogging,
) -> RpcLogLayer {
    RpcLogLayer::new(metrics.clone(), call_timeout, logging, None)
}

#[tokio::test]
async fn successful_call_is_recorded_once_as_ok_with_the_full_method_name() {
    let metrics = metrics();
    let (inner, seen) = scripted(probe_reply(Some(true)));
    let mut client = IdentityClient::new(layer(&metrics, None, CallLogging::Off).layer(inner));

    let response = client.probe(ProbeRequest {}).await.unwrap();

    assert_eq!(response.into_inner().ready, Some(true));
    assert_eq!(seen.lock().unwrap()[0].0, PROBE);
    assert_eq!(count(&metrics, PROBE, "OK"), Some(1));
    assert_eq!(all_counts(&metrics).len(), 1, "{:?}", all_counts(&metrics));
}

#[tokio::test]
async fn trailers_only_error_is_recorded_with_its_code() {
    let metrics = metrics();
    let (inner, _) = scripted(Reply::TrailersOnly(Code::NotFound, "no such volume"));
    let mut client = IdentityClient::new(layer(&metrics, None, CallLogging::Off).layer(inner));

    let status = client.probe(ProbeRequest {}).await.unwrap_err();

    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.message(), "no such volume");
    assert_eq!(count(&metrics, PROBE, "NotFound"), Some(1));
    assert_eq!(all_counts(&metrics).len(), 1);
}

#[tokio::test]
async fn error_in_trailers_is_recorded_with_its_code() {
    let metrics = metrics();
    let (inner, _) = scripted(Reply::Message(Bytes::new(), Code::FailedPrecondition));
    let mut client = IdentityClient::new(layer(&metrics, None, CallLogging::Off).layer(inner));

    let status = client.probe(ProbeRequest {}).await.unwrap_err();

    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(count(&metrics, PROBE, "FailedPrecondition"), Some(1));
}

#[tokio::test]
async fn transport_error_without_status_is_unavailable_like_grpc_go() {
    let metrics = metrics();
    let (inner, _) = scripted(Reply::TransportError);
    let mut client = IdentityClient::new(layer(&metrics, None, CallLogging::Off).layer(inner));

    let status = client.probe(ProbeRequest {}).await.unwrap_err();

    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(count(&metrics, PROBE, "Unavailable"), Some(1));
    assert_eq!(count(&metrics, PROBE, "unknown-non-grpc"), None);
}

#[tokio::test]
async fn grpc_timeout_sent_to_the_driver_is_the_smaller_of_call_and_request_timeout() {
    let cases = [
        (Some(Duration::from_secs(10)), None, Some("10000000u")),
        (
            Some(Duration::from_secs(10)),
            Some(Duration::from_secs(2)),
            Some("2000000u"),
        ),
        (
            Some(Duration::from_secs(1)),
            Some(Duration::from_secs(5)),
            Some("1000000u"),
        ),
        (None, Some(Duration::from_millis(1500)), Some("1500000u")),
        (None, None, None),
    ];
    for (call_timeout, request_timeout, want) in cases {
        let metrics = metrics();
        let (inner, seen) = scripted(probe_reply(None));
        let mut client =
            IdentityClient::new(layer(&metrics, call_timeout, CallLogging::Off).layer(inner));
        let mut request = tonic::Request::new(ProbeRequest {});
        if let Some(timeout) = request_timeout {
            request.set_timeout(timeout);
        }
        client.probe(request).await.unwrap();
        let seen = seen.lock().unwrap();
        let header = seen[0]
            .1
            .get(GRPC_TIMEOUT_HEADER)
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(
            header.as_deref(),
            want,
            "{call_timeout:?} / {request_timeout:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn slow_driver_gets_deadline_exceeded_at_the_call_timeout() {
    let metrics = metrics();
    let (inner, _) = scripted(Reply::Delayed(
        Duration::from_mins(1),
        Box::new(probe_reply(None)),
    ));
    let mut client = IdentityClient::new(
        layer(&metrics, Some(Duration::from_secs(10)), CallLogging::Off).layer(inner),
    );
    let start = Instant::now();

    let status = client.probe(ProbeRequest {}).await.unwrap_err();

    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(status.message(), "context deadline exceeded");
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(count(&metrics, PROBE, "DeadlineExceeded"), Some(1));
    assert_eq!(all_counts(&metrics).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn request_timeout_shorter_than_call_timeout_ends_the_call_first() {
    let metrics = metrics();
    let (inner, _) = scripted(Reply::Delayed(
        Duration::from_mins(1),
        Box::new(probe_reply(None)),
    ));
    let mut client = IdentityClient::new(
        layer(&metrics, Some(Duration::from_secs(10)), CallLogging::Off).layer(inner),
    );
    let mut request = tonic::Request::new(ProbeRequest {});
    request.set_timeout(Duration::from_secs(3));
    let start = Instant::now();

    let status = client.probe(request).await.unwrap_err();

    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(count(&metrics, PROBE, "DeadlineExceeded"), Some(1));
}

#[tokio::test(start_paused = true)]
async fn stalled_response_body_ends_at_the_deadline() {
    let metrics = metrics();
    let (inner, _) = scripted(Reply::StalledBody);
    let mut client = IdentityClient::new(
        layer(&metrics, Some(Duration::from_secs(5)), CallLogging::Off).layer(inner),
    );

    let status = client.probe(ProbeRequest {}).await.unwrap_err();

    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(count(&metrics, PROBE, "DeadlineExceeded"), Some(1));
    assert_eq!(all_counts(&metrics).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn abandoned_call_is_recorded_as_canceled() {
    let metrics = metrics();
    let (inner, _) = scripted(Reply::Delayed(
        Duration::from_mins(1),
        Box::new(probe_reply(None)),
    ));
    let mut client = IdentityClient::new(layer(&metrics, None, CallLogging::Off).layer(inner));

    let abandoned =
        tokio::time::timeout(Duration::from_secs(1), client.probe(ProbeRequest {})).await;

    assert!(abandoned.is_err(), "the call should still be pending");
    assert_eq!(count(&metrics, PROBE, "Canceled"), Some(1));
    assert_eq!(all_counts(&metrics).len(), 1);
}

#[tokio::test]
async fn unary_call_records_no_second_observation_when_the_body_is_dropped_after_trailers() {
    let metrics = metrics();
    let (inner, _) = scripted(probe_reply(Some(false)));
    let mut service = layer(&metrics, None, CallLogging::Off).layer(inner);
    let request = http::Request::builder()
        .uri(format!("http://localhost{PROBE}"))
        .body(Body::empty())
        .unwrap();

    let response = service.call(request).await.unwrap();
    let collected = response.into_body().collect().await.unwrap();

    assert!(collected.trailers().is_some());
    assert_eq!(count(&metrics, PROBE, "OK"), Some(1));
    assert_eq!(all_counts(&metrics).len(), 1);
}

#[test]
fn grpc_timeout_values_parse_per_the_http2_spec() {
    let cases = [
        ("1H", Some(Duration::from_hours(1))),
        ("2M", Some(Duration::from_mins(2))),
        ("30S", Some(Duration::from_secs(30))),
        ("1500m", Some(Duration::from_millis(1500))),
        ("7u", Some(Duration::from_micros(7))),
        ("99999999n", Some(Duration::from_nanos(99_999_999))),
        ("123456789n", None),
        ("", None),
        ("S", None),
        ("10", None),
        ("10s", None),
        ("-1S", None),
        ("1.5S", None),
    ];
    for (value, want) in cases {
        assert_eq!(
            parse_grpc_timeout(&HeaderValue::from_static(value)),
            want,
            "{value:?}"
        );
    }
}

#[test]
fn grpc_timeout_encoding_uses_the_most_precise_unit_that_fits() {
    let cases = [
        (Duration::from_nanos(5), Some("5n")),
        (Duration::from_millis(99), Some("99000000n")),
        (Duration::from_secs(1), Some("1000000u")),
        (Duration::from_secs(15), Some("15000000u")),
        (Duration::from_mins(10), Some("600000m")),
        (Duration::from_hours(72), Some("259200S")),
        (Duration::from_hours(28_800), Some("1728000M")),
        (MAX_GRPC_TIMEOUT, Some("99999999H")),
        (MAX_GRPC_TIMEOUT + Duration::from_hours(1), None),
        (Duration::MAX, None),
    ];
    for (timeout, want) in cases {
        let got = encode_grpc_timeout(timeout);
        assert_eq!(
            got.as_ref().map(|v| v.to_str().unwrap()),
            want,
            "{timeout:?}"
        );
        if let Some(value) = got {
            let back = parse_grpc_timeout(&value).unwrap();
            assert!(
                back <= timeout && timeout.saturating_sub(back) < Duration::from_hours(1),
                "{timeout:?}"
            );
        }
    }
}

#[test]
fn log_cap_appends_csi_lib_utils_note_only_when_needed() {
    let cases = [
        ("{\"a\":1}", None, "{\"a\":1}"),
        ("{\"a\":1}", Some(0), "{\"a\":1}"),
        ("{\"a\":1}", Some(7), "{\"a\":1}"),
        (
            "{\"a\":1}",
            Some(3),
            "{\"a [response body too large, log capped to 3 chars]",
        ),
        // Never cut inside a character: "é" is two bytes.
        (
            "éé",
            Some(3),
            "é [response body too large, log capped to 3 chars]",
        ),
    ];
    for (input, max, want) in cases {
        assert_eq!(
            cap_log_length(input.to_owned(), max),
            want,
            "{input:?} {max:?}"
        );
    }
}

#[test]
fn only_complete_uncompressed_frames_are_decoded() {
    assert_eq!(first_message(&framed(b"abc")), Some(&b"abc"[..]));
    assert_eq!(first_message(&framed(b"")), Some(&b""[..]));
    assert_eq!(first_message(&framed(b"abc")[..6]), None);
    assert_eq!(first_message(&[1, 0, 0, 0, 1, 9]), None);
    assert_eq!(first_message(&[0, 0]), None);
}

#[test]
fn errors_are_logged_as_grpc_go_prints_them() {
    assert_eq!(go_error_text(Code::Ok, ""), "<nil>");
    assert_eq!(
        go_error_text(Code::DeadlineExceeded, "context deadline exceeded"),
        "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
    );
    assert_eq!(
        go_error_text(Code::Cancelled, "context canceled"),
        "rpc error: code = Canceled desc = context canceled"
    );
}

#[test]
fn message_types_come_from_the_csi_descriptors() {
    let types = MessageTypes::csi();
    assert_eq!(
        types.get(PROBE, Direction::Request),
        Some("csi.v1.ProbeRequest")
    );
    assert_eq!(
        types.get(CREATE_VOLUME, Direction::Response),
        Some("csi.v1.CreateVolumeResponse")
    );
    assert_eq!(
        types.get(
            "/pluginregistration.Registration/GetInfo",
            Direction::Response
        ),
        Some("pluginregistration.PluginInfo")
    );
    assert_eq!(
        types.get("/csi.v1.Identity/NoSuchMethod", Direction::Request),
        None
    );
    assert_eq!(types.get("/no.Such/Service", Direction::Request), None);
    assert_eq!(types.get("garbage", Direction::Request), None);
}

fn create_volume_request() -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: "pvc-1234".to_owned(),
        secrets: HashMap::from([("password".to_owned(), "hunter2-secret".to_owned())]),
        ..Default::default()
    }
}

fn create_volume_reply(context_len: usize) -> Reply {
    let response = CreateVolumeResponse {
        volume: Some(Volume {
            volume_id: "vol-1".to_owned(),
            volume_context: HashMap::from([("big".to_owned(), "x".repeat(context_len))]),
            ..Default::default()
        }),
    };
    Reply::Message(response.encode_to_vec().into(), Code::Ok)
}

#[tokio::test]
async fn call_log_strips_secrets_and_shows_request_and_response() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let metrics = metrics();
    let (inner, _) = scripted(create_volume_reply(3));
    let logging = CallLogging::On {
        max_response_length: None,
    };
    let mut client = ControllerClient::new(layer(&metrics, None, logging).layer(inner));

    client.create_volume(create_volume_request()).await.unwrap();

    let text = logs.text();
    assert!(!text.contains("hunter2-secret"), "secret leaked: {text}");
    let call = text.lines().find(|l| l.contains("GRPC call")).expect(&text);
    assert!(call.contains(CREATE_VOLUME), "{call}");
    assert!(call.contains("pvc-1234"), "{call}");
    assert!(call.contains("***stripped***"), "{call}");
    let response = text
        .lines()
        .find(|l| l.contains("GRPC response"))
        .expect(&text);
    assert!(response.contains("vol-1"), "{response}");
    assert!(response.contains("xxx"), "{response}");
    assert!(response.contains("<nil>"), "{response}");
    assert!(!response.contains("log capped"), "{response}");
}

#[tokio::test]
async fn call_log_caps_long_responses() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let metrics = metrics();
    let (inner, _) = scripted(create_volume_reply(500));
    let logging = CallLogging::On {
        max_response_length: Some(40),
    };
    let mut client = ControllerClient::new(layer(&metrics, None, logging).layer(inner));

    client.create_volume(create_volume_request()).await.unwrap();

    let text = logs.text();
    let response = text
        .lines()
        .find(|l| l.contains("GRPC response"))
        .expect(&text);
    assert!(
        response.contains(" [response body too large, log capped to 40 chars]"),
        "{response}"
    );
    assert!(!response.contains(&"x".repeat(100)), "{response}");
}

#[tokio::test]
async fn failed_call_logs_the_error_and_an_empty_response() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let metrics = metrics();
    let (inner, _) = scripted(Reply::TrailersOnly(Code::OutOfRange, "too big"));
    let logging = CallLogging::On {
        max_response_length: None,
    };
    let mut client = ControllerClient::new(layer(&metrics, None, logging).layer(inner));

    client
        .create_volume(create_volume_request())
        .await
        .unwrap_err();

    let text = logs.text();
    let response = text
        .lines()
        .find(|l| l.contains("GRPC response"))
        .expect(&text);
    assert!(
        response.contains("rpc error: code = OutOfRange desc = too big"),
        "{response}"
    );
    assert!(response.contains("{}"), "{response}");
    assert_eq!(count(&metrics, CREATE_VOLUME, "OutOfRange"), Some(1));
}

#[tokio::test]
async fn nothing_is_logged_when_call_logging_is_off() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let metrics = metrics();
    let (inner, _) = scripted(create_volume_reply(3));
    let mut client = ControllerClient::new(layer(&metrics, None, CallLogging::Off).layer(inner));

    client.create_volume(create_volume_request()).await.unwrap();

    let text = logs.text();
    assert!(!text.contains("GRPC call"), "{text}");
    assert!(!text.contains("GRPC response"), "{text}");
}

/// Every Controller and GroupController method that creates, deletes, publishes, expands or
/// modifies something (CSI spec v1.12).
const WRITING_METHODS: [&str; 10] = [
    "/csi.v1.Controller/CreateVolume",
    "/csi.v1.Controller/DeleteVolume",
    "/csi.v1.Controller/ControllerPublishVolume",
    "/csi.v1.Controller/ControllerUnpublishVolume",
    "/csi.v1.Controller/CreateSnapshot",
    "/csi.v1.Controller/DeleteSnapshot",
    "/csi.v1.Controller/ControllerExpandVolume",
    "/csi.v1.Controller/ControllerModifyVolume",
    "/csi.v1.GroupController/CreateVolumeGroupSnapshot",
    "/csi.v1.GroupController/DeleteVolumeGroupSnapshot",
];

#[test]
fn only_the_controller_calls_that_change_volumes_are_fenced() {
    for path in WRITING_METHODS {
        assert!(changes_volumes(path), "{path}");
    }
    for path in READ_ONLY_METHODS.iter().copied().chain([
        PROBE,
        "/csi.v1.Identity/GetPluginInfo",
        "/csi.v1.Identity/GetPluginCapabilities",
        "/csi.v1.Node/NodePublishVolume",
        "/csi.v1.Node/NodeGetInfo",
        "/pluginregistration.Registration/GetInfo",
        "garbage",
    ]) {
        assert!(!changes_volumes(path), "{path}");
    }
    // A method of those services nobody has classified is a write until it is listed.
    assert!(changes_volumes("/csi.v1.Controller/SomeFutureMethod"));
}

#[test]
fn every_controller_method_of_the_descriptors_is_classified() {
    let types = MessageTypes::csi();
    let mut in_descriptors: Vec<&str> = types
        .by_path
        .keys()
        .map(String::as_str)
        .filter(|path| {
            path.starts_with("/csi.v1.Controller/") || path.starts_with("/csi.v1.GroupController/")
        })
        .collect();
    in_descriptors.sort_unstable();
    let mut classified: Vec<&str> = READ_ONLY_METHODS
        .iter()
        .chain(&WRITING_METHODS)
        .copied()
        .collect();
    classified.sort_unstable();
    assert_eq!(
        in_descriptors, classified,
        "a CSI method was added or renamed: list it as read-only or writing"
    );
}

#[tokio::test]
async fn a_closed_fence_stops_the_calls_that_change_volumes_and_lets_reads_through() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let metrics = metrics();
    let fence = Fence::new();
    let (inner, seen) = scripted(create_volume_reply(3));
    let layer = RpcLogLayer::new(
        metrics.clone(),
        None,
        CallLogging::On {
            max_response_length: None,
        },
        Some(fence.clone()),
    );
    let mut controller = ControllerClient::new(layer.clone().layer(inner.clone()));

    // Open (leading): sent.
    controller
        .create_volume(create_volume_request())
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);

    fence.close();
    let status = controller
        .create_volume(create_volume_request())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), NotLeading.to_string());
    assert_eq!(seen.lock().unwrap().len(), 1, "the driver saw the call");
    assert_eq!(
        count(&metrics, CREATE_VOLUME, "OK"),
        Some(1),
        "{:?}",
        all_counts(&metrics)
    );
    assert_eq!(all_counts(&metrics).len(), 1, "{:?}", all_counts(&metrics));
    let text = logs.text();
    assert!(
        text.lines()
            .any(|l| l.contains("GRPC response") && l.contains("code = Unavailable")),
        "{text}"
    );

    // Reads and probes still go out (what the scripted driver answers them does not matter).
    let _ = controller
        .controller_get_capabilities(ControllerGetCapabilitiesRequest {})
        .await;
    let mut identity = IdentityClient::new(layer.layer(inner));
    let _ = identity.probe(ProbeRequest {}).await;
    let paths: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(
        paths,
        [
            CREATE_VOLUME,
            "/csi.v1.Controller/ControllerGetCapabilities",
            PROBE
        ]
    );
}
