//! What a message can be made of ([`IntoMessage`]): owned buffers are
//! taken as they are, without copying, and held as [`Bytes`] until the
//! peer acknowledges them (spec §13.5, §14.4: one copy serves every
//! retransmission and every receiver); borrowed bytes are copied once,
//! into the connection's send buffer, with no allocation of their own
//! (issue 21: a stream of small messages allocates nothing per message).

use bytes::Bytes;

/// Data that can be sent as one message ([`Streams::send_message`](crate::Streams::send_message),
/// [`Group::send`](crate::Group::send)).
///
/// Owned data is taken without copying: [`Bytes`], `Vec<u8>`, `String`,
/// `Box<[u8]>`, and a `&Bytes` (a reference-counted clone). Borrowed data
/// is copied once, since it must outlive the call until the peer has it:
/// `&[u8]`, `&[u8; N]` (so `b"literal"` works), `&Vec<u8>`, `&str`,
/// `&String`.
///
/// ```
/// use manyfold::IntoMessage;
/// let owned = vec![1u8, 2, 3];
/// let ptr = owned.as_ptr();
/// assert_eq!(owned.into_message().as_ptr(), ptr); // taken, not copied
/// assert_eq!(b"hi".into_message(), &b"hi"[..]); // copied
/// ```
pub trait IntoMessage {
    /// The message's bytes.
    fn into_message(self) -> Bytes;

    /// How the driver hands the message to the engine: owned data as it
    /// is; borrowed data is copied by the engine into its send buffer.
    #[doc(hidden)]
    fn into_payload<'a>(self) -> Payload<'a>
    where
        Self: Sized + 'a,
    {
        Payload::Shared(self.into_message())
    }
}

/// A message on its way to the engine ([`IntoMessage::into_payload`]).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Payload<'a> {
    /// Held as it is until acknowledged (a reference-counted clone).
    Shared(Bytes),
    /// Copied into the connection's send buffer when queued.
    Borrowed(&'a [u8]),
}

impl Payload<'_> {
    /// Queues it on `stream` of connection `conn`.
    pub(crate) fn queue(
        &self,
        conn: &mut manyfold_proto::ConnMut<'_>,
        now: std::time::Instant,
        stream: manyfold_proto::StreamId,
        opts: manyfold_proto::MessageOptions,
    ) -> Result<(), manyfold_proto::SendError> {
        match self {
            Payload::Shared(b) => conn.send_shared_message(now, stream, b.clone(), opts),
            Payload::Borrowed(s) => conn.send_message(now, stream, s, opts),
        }
    }
}

impl IntoMessage for Bytes {
    fn into_message(self) -> Bytes {
        self
    }
}

impl IntoMessage for &Bytes {
    fn into_message(self) -> Bytes {
        self.clone()
    }
}

impl IntoMessage for Vec<u8> {
    fn into_message(self) -> Bytes {
        Bytes::from(self)
    }
}

impl IntoMessage for String {
    fn into_message(self) -> Bytes {
        Bytes::from(self)
    }
}

impl IntoMessage for Box<[u8]> {
    fn into_message(self) -> Bytes {
        Bytes::from(self)
    }
}

impl IntoMessage for &[u8] {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }

    fn into_payload<'a>(self) -> Payload<'a>
    where
        Self: 'a,
    {
        Payload::Borrowed(self)
    }
}

impl<const N: usize> IntoMessage for &[u8; N] {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }

    fn into_payload<'a>(self) -> Payload<'a>
    where
        Self: 'a,
    {
        Payload::Borrowed(self)
    }
}

impl IntoMessage for &Vec<u8> {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }

    fn into_payload<'a>(self) -> Payload<'a>
    where
        Self: 'a,
    {
        Payload::Borrowed(self)
    }
}

impl IntoMessage for &str {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }

    fn into_payload<'a>(self) -> Payload<'a>
    where
        Self: 'a,
    {
        Payload::Borrowed(self.as_bytes())
    }
}

impl IntoMessage for &String {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }

    fn into_payload<'a>(self) -> Payload<'a>
    where
        Self: 'a,
    {
        Payload::Borrowed(self.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_buffers_are_taken_without_a_copy() {
        let v = vec![7u8; 100];
        let p = v.as_ptr();
        assert_eq!(v.into_message().as_ptr(), p);
        let s = String::from("message");
        let p = s.as_ptr();
        assert_eq!(s.into_message().as_ptr(), p);
        let b = Bytes::from(vec![1u8; 10]);
        assert_eq!((&b).into_message().as_ptr(), b.as_ptr());
    }

    #[test]
    fn borrowed_bytes_are_copied_with_the_same_content() {
        let v = vec![1u8, 2, 3];
        let m = (&v).into_message();
        assert_eq!(m, v);
        assert_ne!(m.as_ptr(), v.as_ptr());
        assert_eq!(b"abc".into_message(), &b"abc"[..]);
        assert_eq!("xyz".into_message(), &b"xyz"[..]);
        assert_eq!((&v[1..]).into_message(), &[2u8, 3][..]);
    }

    #[test]
    fn borrowed_bytes_go_to_the_engine_borrowed_and_owned_ones_shared() {
        let v = vec![1u8, 2, 3];
        assert!(matches!((&v).into_payload(), Payload::Borrowed(s) if s.as_ptr() == v.as_ptr()));
        assert!(matches!("ab".into_payload(), Payload::Borrowed(b"ab")));
        assert!(matches!(b"xy".into_payload(), Payload::Borrowed(b"xy")));
        let p = v.as_ptr();
        assert!(matches!(v.into_payload(), Payload::Shared(b) if b.as_ptr() == p));
    }
}
