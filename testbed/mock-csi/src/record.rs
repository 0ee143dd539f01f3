//! The record of every call the mock driver received, for assertions in tests.
//!
//! Requests are kept prost-encoded, so one list holds every message type; decode them with
//! [`RecordedCall::decode`] or `MockDriverHandle::requests`.

use prost::Message;
use tokio::time::Instant;
use tonic::Code;

use super::method::Method;

/// One call received by the mock driver.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// Position in the driver's lifetime (0 = first call ever), stable across `clear_calls`.
    pub seq: u64,
    /// The RPC.
    pub method: Method,
    /// When the call arrived (tokio clock, so it follows a paused test clock).
    pub at: Instant,
    /// The request message, prost-encoded.
    pub request: Vec<u8>,
    /// The status code the driver answered (`Ok` on success). `None` while the call is still
    /// running (e.g. delayed), or for good when the driver was stopped before answering. A
    /// delayed call is still answered after its client gave up, as a real driver finishes work
    /// the caller stopped waiting for.
    pub code: Option<Code>,
    /// The status message answered (empty on success or while running).
    pub message: String,
    /// When the answer went out (tokio clock); `None` while the call is running.
    pub answered: Option<Instant>,
    /// Whether the answer was OK with nonsense in it (a [`crate::Garbage`] fault): the
    /// caller rightly does not take it for a success.
    pub garbled: bool,
    /// Whether the caller was still waiting when the answer went out (a caller past its
    /// deadline has cancelled the call, and the answer of a delayed call reaches nobody).
    pub delivered: bool,
}

impl RecordedCall {
    /// Decodes the recorded request as `M`.
    ///
    /// # Errors
    /// When the bytes are not a valid `M` (the call was of another method).
    pub fn decode<M: Message + Default>(&self) -> Result<M, prost::DecodeError> {
        M::decode(self.request.as_slice())
    }

    /// The gRPC full path of the call, e.g. `/csi.v1.Controller/CreateVolume`.
    pub fn path(&self) -> &'static str {
        self.method.full_path()
    }
}

/// Calls in arrival order. Completion is written back by `seq`.
#[derive(Debug, Default)]
pub(crate) struct CallLog {
    calls: Vec<RecordedCall>,
    /// `seq` of `calls[0]`: calls before it were cleared.
    first_seq: u64,
}

impl CallLog {
    pub(crate) fn begin(&mut self, method: Method, request: Vec<u8>) -> u64 {
        let seq = self.first_seq + self.calls.len() as u64;
        self.calls.push(RecordedCall {
            seq,
            method,
            at: Instant::now(),
            request,
            code: None,
            message: String::new(),
            answered: None,
            garbled: false,
            delivered: false,
        });
        seq
    }

    pub(crate) fn finish(&mut self, seq: u64, code: Code, message: &str, garbled: bool) {
        let Some(index) = seq.checked_sub(self.first_seq) else {
            return;
        };
        if let Some(call) = usize::try_from(index)
            .ok()
            .and_then(|i| self.calls.get_mut(i))
        {
            call.code = Some(code);
            message.clone_into(&mut call.message);
            call.answered = Some(Instant::now());
            call.garbled = garbled;
        }
    }

    pub(crate) fn delivered(&mut self, seq: u64) {
        if let Some(call) = seq
            .checked_sub(self.first_seq)
            .and_then(|index| usize::try_from(index).ok())
            .and_then(|i| self.calls.get_mut(i))
        {
            call.delivered = true;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.first_seq += self.calls.len() as u64;
        self.calls.clear();
    }

    pub(crate) fn all(&self) -> &[RecordedCall] {
        &self.calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finishing_a_call_after_clear_is_ignored_and_seq_keeps_counting() {
        let mut log = CallLog::default();
        let first = log.begin(Method::Probe, vec![]);
        log.clear();
        log.finish(first, Code::Ok, "", false);
        let second = log.begin(Method::Probe, vec![]);
        log.finish(second, Code::NotFound, "gone", false);
        assert_eq!(second, 1);
        assert_eq!(log.all().len(), 1);
        assert_eq!(log.all()[0].code, Some(Code::NotFound));
        assert_eq!(log.all()[0].message, "gone");
    }
}
