//! What a message can be made of ([`IntoMessage`]): owned buffers are
//! taken as they are, without copying, and held as [`Bytes`] until the
//! peer acknowledges them (spec §13.5, §14.4: one copy serves every
//! retransmission and every receiver); borrowed bytes are copied once.

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
}

impl<const N: usize> IntoMessage for &[u8; N] {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl IntoMessage for &Vec<u8> {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl IntoMessage for &str {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl IntoMessage for &String {
    fn into_message(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
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
}
