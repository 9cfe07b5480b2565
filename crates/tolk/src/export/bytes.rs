//! The byte-level encoding of exported programs: little-endian fixed-width
//! integers, lengths before what they count, and a reader that returns an
//! error (never panics, never allocates more than the input could hold)
//! on every malformed or truncated input.

/// Appends encoded values to a buffer.
#[derive(Default)]
pub struct Writer {
    /// The bytes written so far.
    pub bytes: Vec<u8>,
}

impl Writer {
    /// One byte.
    pub fn u8(&mut self, x: u8) {
        self.bytes.push(x);
    }
    /// A little-endian `u32`.
    pub fn u32(&mut self, x: u32) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }
    /// A little-endian `u64`.
    pub fn u64(&mut self, x: u64) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }
    /// A `usize` as a `u64` (the same on every host).
    pub fn usize(&mut self, x: usize) {
        self.u64(x as u64);
    }
    /// An `isize` as an `i64`'s bits.
    pub fn isize(&mut self, x: isize) {
        self.u64(x as i64 as u64);
    }
    /// An `f64` by its bits (a NaN's payload and the sign of zero kept).
    pub fn f64(&mut self, x: f64) {
        self.u64(x.to_bits());
    }
    /// `false` or `true` as 0 or 1.
    pub fn bool(&mut self, x: bool) {
        self.u8(x as u8);
    }
    /// A length, then the bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.usize(b.len());
        self.bytes.extend_from_slice(b);
    }
    /// A string as its UTF-8 bytes.
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    /// A length, then each `usize`.
    pub fn usizes(&mut self, v: &[usize]) {
        self.usize(v.len());
        for &x in v {
            self.usize(x);
        }
    }
}

/// Reads values back from a byte slice, in the order they were written.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Why bytes could not be read: what was expected, and where.
pub type ReadError = String;

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Whether every byte has been read.
    pub fn is_done(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ReadError> {
        if n > self.remaining() {
            return Err(format!(
                "{what}: needs {n} bytes at offset {}, {} left",
                self.at,
                self.remaining()
            ));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    /// One byte.
    pub fn u8(&mut self, what: &str) -> Result<u8, ReadError> {
        Ok(self.take(1, what)?[0])
    }
    /// A little-endian `u32`.
    pub fn u32(&mut self, what: &str) -> Result<u32, ReadError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A little-endian `u64`.
    pub fn u64(&mut self, what: &str) -> Result<u64, ReadError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A `usize` (an error where it does not fit this host's).
    pub fn usize(&mut self, what: &str) -> Result<usize, ReadError> {
        let x = self.u64(what)?;
        usize::try_from(x).map_err(|_| format!("{what}: {x} does not fit a usize"))
    }
    /// An `isize`.
    pub fn isize(&mut self, what: &str) -> Result<isize, ReadError> {
        let x = self.u64(what)? as i64;
        isize::try_from(x).map_err(|_| format!("{what}: {x} does not fit an isize"))
    }
    /// An `f64` by its bits.
    pub fn f64(&mut self, what: &str) -> Result<f64, ReadError> {
        Ok(f64::from_bits(self.u64(what)?))
    }
    /// 0 or 1.
    pub fn bool(&mut self, what: &str) -> Result<bool, ReadError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("{what}: {b} is not a bool")),
        }
    }
    /// A length, then that many bytes.
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8], ReadError> {
        let n = self.usize(what)?;
        self.take(n, what)
    }
    /// A UTF-8 string.
    pub fn str(&mut self, what: &str) -> Result<&'a str, ReadError> {
        std::str::from_utf8(self.bytes(what)?).map_err(|e| format!("{what}: not UTF-8: {e}"))
    }
    /// A count of items that take at least `min_bytes` each: an error when
    /// the rest of the input could not hold them (so a corrupt count never
    /// reserves memory the input cannot justify).
    pub fn count(&mut self, min_bytes: usize, what: &str) -> Result<usize, ReadError> {
        let n = self.usize(what)?;
        if n.saturating_mul(min_bytes.max(1)) > self.remaining() {
            return Err(format!(
                "{what}: a count of {n} at offset {} is more than the {} bytes left hold",
                self.at,
                self.remaining()
            ));
        }
        Ok(n)
    }
    /// A length, then each `usize`.
    pub fn usizes(&mut self, what: &str) -> Result<Vec<usize>, ReadError> {
        let n = self.count(8, what)?;
        (0..n).map(|_| self.usize(what)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_and_every_truncation_is_an_error() {
        let mut w = Writer::default();
        w.u8(7);
        w.u32(0xdead_beef);
        w.isize(-5);
        w.f64(-0.0);
        w.bool(true);
        w.str("héllo");
        w.usizes(&[1, 2, 3]);
        let all = w.bytes;
        let read = |b: &[u8]| -> Result<(), ReadError> {
            let mut r = Reader::new(b);
            assert_eq!(r.u8("a")?, 7);
            assert_eq!(r.u32("b")?, 0xdead_beef);
            assert_eq!(r.isize("c")?, -5);
            assert_eq!(r.f64("d")?.to_bits(), (-0.0f64).to_bits());
            assert!(r.bool("e")?);
            assert_eq!(r.str("f")?, "héllo");
            assert_eq!(r.usizes("g")?, vec![1, 2, 3]);
            assert!(r.is_done());
            Ok(())
        };
        read(&all).unwrap();
        for n in 0..all.len() {
            assert!(read(&all[..n]).is_err(), "truncated to {n} bytes");
        }
    }

    #[test]
    fn a_huge_count_is_refused_before_allocating() {
        let mut w = Writer::default();
        w.usize(usize::MAX / 2);
        assert!(Reader::new(&w.bytes).usizes("v").is_err());
    }
}
