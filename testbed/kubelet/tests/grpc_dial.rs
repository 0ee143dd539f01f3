//! `testbed_kubelet::grpc_dial` speaks like grpc-go: the `:authority` on the wire is what each client
//! style sends, a plain tonic server refuses the socket path exactly as it refuses kubelet,
//! and a server behind `csi_common::h2_authority::RepairAuthority` accepts every style.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use csi_common::h2_authority::RepairAuthority;
use proto::pluginregistration::v1::registration_client::RegistrationClient;
use proto::pluginregistration::v1::registration_server::{Registration, RegistrationServer};
use proto::pluginregistration::v1::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use testbed_kubelet::grpc_dial::{self, Authority};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;

#[derive(Debug)]
struct Plugin;

#[tonic::async_trait]
impl Registration for Plugin {
    async fn get_info(
        &self,
        _: tonic::Request<InfoRequest>,
    ) -> Result<tonic::Response<PluginInfo>, tonic::Status> {
        Ok(tonic::Response::new(PluginInfo {
            r#type: "CSIPlugin".to_owned(),
            name: "hostpath.csi.k8s.io".to_owned(),
            endpoint: String::new(),
            supported_versions: vec!["1.0.0".to_owned()],
        }))
    }

    async fn notify_registration_status(
        &self,
        _: tonic::Request<RegistrationStatus>,
    ) -> Result<tonic::Response<RegistrationStatusResponse>, tonic::Status> {
        Ok(tonic::Response::new(RegistrationStatusResponse {}))
    }
}

/// Serves the Registration service on a fresh socket, with or without the repair layer.
fn serve(dir: &Path, repaired: bool) -> PathBuf {
    let path = dir.join(if repaired {
        "repaired-reg.sock"
    } else {
        "plain-reg.sock"
    });
    let incoming = UnixListenerStream::new(UnixListener::bind(&path).unwrap());
    let router = tonic::transport::Server::builder().add_service(RegistrationServer::new(Plugin));
    if repaired {
        tokio::spawn(router.serve_with_incoming(incoming.map(|s| s.map(RepairAuthority::new))));
    } else {
        tokio::spawn(router.serve_with_incoming(incoming));
    }
    path
}

async fn get_info(path: &Path, authority: Authority) -> Result<PluginInfo, tonic::Status> {
    let channel = grpc_dial::dial(path, authority).await.unwrap();
    let mut client = RegistrationClient::new(channel);
    // Twice: the second request's header block refers to the dynamic table the first filled.
    client.get_info(InfoRequest {}).await?;
    client
        .get_info(InfoRequest {})
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn a_plain_tonic_server_refuses_the_socket_path_as_it_refuses_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let plain = serve(dir.path(), false);
    for authority in [Authority::SocketPath, Authority::Empty] {
        let status = get_info(&plain, authority).await.unwrap_err();
        // Kubelet's log: "rpc error: code = Internal desc = stream terminated by RST_STREAM
        // with error code: PROTOCOL_ERROR" — tonic words the same reset its own way.
        assert_eq!(
            status.code(),
            tonic::Code::Internal,
            "{authority:?}: {status:?}"
        );
        let text = format!("{status:?}");
        assert!(text.contains("PROTOCOL_ERROR"), "{authority:?}: {text}");
    }
    for authority in [Authority::Localhost, Authority::Absent] {
        get_info(&plain, authority).await.unwrap();
    }
}

#[tokio::test]
async fn a_repaired_server_accepts_every_client_style() {
    let dir = tempfile::tempdir().unwrap();
    let repaired = serve(dir.path(), true);
    for authority in Authority::ALL {
        let info = get_info(&repaired, authority).await.unwrap();
        assert_eq!(info.name, "hostpath.csi.k8s.io", "{authority:?}");
    }
}

/// Reads the first request header block a client writes to a raw socket and decodes it.
async fn first_request_on_the_wire(authority: Authority) -> (PathBuf, Vec<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let client = {
        let path = path.clone();
        tokio::spawn(async move {
            let channel = grpc_dial::dial(&path, authority).await.unwrap();
            let _ = RegistrationClient::new(channel)
                .get_info(InfoRequest {})
                .await;
        })
    };
    let (mut stream, _) = listener.accept().await.unwrap();
    // An empty SETTINGS frame and the ACK of the client's, so the client sends its request.
    stream
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0])
        .await
        .unwrap();
    let mut preface = [0; 24];
    stream.read_exact(&mut preface).await.unwrap();
    assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let mut block = Vec::new();
    loop {
        let mut head = [0; 9];
        stream.read_exact(&mut head).await.unwrap();
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0; len];
        stream.read_exact(&mut payload).await.unwrap();
        if head[3] == 0x1 || head[3] == 0x9 {
            assert_eq!(head[4] & 0x28, 0, "no padding or priority from this client");
            block.extend_from_slice(&payload);
            if head[4] & 0x4 != 0 {
                break;
            }
        }
    }
    client.abort();
    let fields = loona_hpack::Decoder::new()
        .decode(&block)
        .unwrap()
        .into_iter()
        .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
    drop(dir);
    (path, fields)
}

#[tokio::test]
async fn the_wire_carries_the_authority_of_each_client_style() {
    for authority in Authority::ALL {
        let (path, fields) = first_request_on_the_wire(authority).await;
        let sent: Vec<&str> = fields
            .iter()
            .filter(|(name, _)| name == ":authority")
            .map(|(_, value)| value.as_str())
            .collect();
        let path = path.to_str().unwrap();
        let expected: &[&str] = match authority {
            Authority::SocketPath => &[path],
            Authority::Empty => &[""],
            Authority::Localhost => &["localhost"],
            Authority::Absent => &[],
        };
        assert_eq!(sent, expected, "{authority:?}");
        // The rest of a gRPC request is as tonic wrote it: pseudo-header fields first.
        assert_eq!(fields[0], (":method".to_owned(), "POST".to_owned()));
        let first_regular = fields
            .iter()
            .position(|(n, _)| !n.starts_with(':'))
            .unwrap();
        assert!(
            fields[first_regular..]
                .iter()
                .all(|(n, _)| !n.starts_with(':'))
        );
        assert!(fields.contains(&(
            ":path".to_owned(),
            "/pluginregistration.Registration/GetInfo".to_owned()
        )));
        assert!(fields.contains(&("te".to_owned(), "trailers".to_owned())));
    }
}
