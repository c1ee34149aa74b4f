//! How the protocols' vectors travel on a real network: as one block of bytes
//! (`#[serde(with = "crate::wire::pod")]` on every `Vec<f32>` and `Vec<i64>` of a message).
//!
//! Serde's default writes a vector element by element; through bincode that moved about
//! 0.5 GB/s here, so a 1 MB message cost its sender and its receiver a millisecond of CPU each,
//! which the network model does not charge and which 4 ranks sharing 2 cores turned into 4x
//! the modelled all-reduce time. As bytes, encoding is one copy and decoding one more. The bytes
//! are in the machine's order: every rank of a real run is the same binary on the same kind of
//! machine. The simulator never serialises messages, so this changes no simulated result.

/// Serde adapter for a vector of plain numbers (`f32`, `i64`, …) as one byte string.
pub mod pod {
    use bytemuck::Pod;
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;
    use std::marker::PhantomData;

    /// Writes `v` as one byte string.
    pub fn serialize<T: Pod, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytemuck::cast_slice(v))
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, T: Pod, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_bytes(PodVisitor(PhantomData))
    }

    struct PodVisitor<T>(PhantomData<T>);

    impl<'de, T: Pod> Visitor<'de> for PodVisitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a byte string of {}-byte numbers", std::mem::size_of::<T>())
        }

        fn visit_bytes<E: Error>(self, b: &[u8]) -> Result<Vec<T>, E> {
            if !b.len().is_multiple_of(std::mem::size_of::<T>()) {
                return Err(E::invalid_length(b.len(), &self));
            }
            // Copies: the bytes need not be aligned for `T`.
            Ok(bytemuck::pod_collect_to_vec(b))
        }

        /// Formats without byte strings (JSON) write the bytes as a sequence of numbers.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut b = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(x) = seq.next_element::<u8>()? {
                b.push(x);
            }
            self.visit_bytes(&b)
        }
    }
}

/// Serde adapter for a shared vector of plain numbers (`Arc<Vec<f32>>`, …): as [`pod`]. A
/// protocol shares a vector with a message so that the simulator, which never serialises, moves
/// no copy of it; a real network sends the bytes as for a plain vector.
pub mod pod_shared {
    use bytemuck::Pod;
    use serde::{Deserializer, Serializer};
    use std::sync::Arc;

    /// Writes `v` as one byte string.
    pub fn serialize<T: Pod, S: Serializer>(v: &Arc<Vec<T>>, s: S) -> Result<S::Ok, S::Error> {
        super::pod::serialize(&v[..], s)
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, T: Pod, D: Deserializer<'de>>(d: D) -> Result<Arc<Vec<T>>, D::Error> {
        super::pod::deserialize(d).map(Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Msg {
        iter: u64,
        #[serde(with = "super::pod")]
        data: Vec<f32>,
        #[serde(with = "super::pod")]
        fixed: Vec<i64>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Shared {
        #[serde(with = "super::pod_shared")]
        data: std::sync::Arc<Vec<f32>>,
    }

    #[test]
    fn a_shared_vector_travels_as_the_plain_one() {
        let data = vec![0.25f32, -0.0, f32::MAX];
        let shared = serde_json::to_string(&Shared { data: std::sync::Arc::new(data.clone()) }).unwrap();
        let plain = serde_json::to_string(&Msg { iter: 0, data: data.clone(), fixed: vec![] }).unwrap();
        assert!(plain.contains(&shared[1..shared.len() - 1]), "{shared} within {plain}");
        let back: Shared = serde_json::from_str(&shared).unwrap();
        assert_eq!(
            back.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            data.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn vectors_round_trip_bit_for_bit_as_bytes() {
        let data = vec![0.0, -0.0, 1.5, f32::MIN_POSITIVE, f32::MAX, f32::NEG_INFINITY, 1e-42];
        let m = Msg { iter: 7, data, fixed: vec![i64::MIN, -1, 0, 1 << 40, i64::MAX] };
        let json = serde_json::to_string(&m).unwrap();
        let back: Msg = serde_json::from_str(&json).unwrap();
        assert_eq!(back.iter, 7);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.data), bits(&m.data));
        assert_eq!(back.fixed, m.fixed);
        // Written as bytes: one number per byte of payload.
        let numbers = json.matches(',').count(); // two commas between fields, one fewer than numbers per array
        assert_eq!(numbers, 4 * m.data.len() + 8 * m.fixed.len());
    }

    #[test]
    fn a_byte_string_of_the_wrong_length_is_refused() {
        let r: Result<Msg, _> = serde_json::from_str(r#"{"iter":1,"data":[1,2,3],"fixed":[]}"#);
        assert!(r.is_err());
    }
}
