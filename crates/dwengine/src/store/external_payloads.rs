//! Runtime external payload rows and their per-namespace usage, the
//! authority of the external-payload quota.
//!
//! A payload is stored once per (namespace, codec, sha256, size): a retried
//! or repeated upload of the same bytes finds the existing row and returns
//! its reference without counting twice. The namespace's byte and object
//! totals live in `external_payload_usage`, kept by triggers (migration
//! 0016) in the row's own transaction, so admission reads one row in the
//! same write transaction as the insert it admits and racing uploads cannot
//! overshoot a quota.
//!
//! Rows are bounded by their holders (migration 0020): triggers record in
//! `external_payload_refs` which run, workflow stream or schedule names
//! which payload, and keep each payload's `ref_count`. A payload nothing
//! holds and not uploaded again within the store's orphan grace is deleted:
//! at once when retention prunes the last run that held it
//! ([`release_run_payloads`]), else by the orphan sweep
//! ([`Store::expire_unreferenced_payloads`]), a bounded index walk.
//!
//! The forms a reference takes in history and on the wire are
//! [`payload_references`](super::payload_references)' (re-exported here);
//! this module holds the rows, and sits above the row helpers it uses.

use crate::store::db::{self, params, BlobColumn, Connection, OptionalExtension, ZeroBlob};

use crate::store::connection::Store;
use crate::store::error::Error;
pub use crate::store::payload_references::{
    runtime_envelope, to_stored_form, to_wire_form, RUNTIME_REFERENCE_SCHEMA, RUNTIME_URI_PREFIX,
    STORED_REFERENCE_SCHEMA,
};
use crate::store::rows::{now_ms, to_i64, to_u64};
use crate::store::tx::WriteTx;

/// A namespace's external payload usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PayloadUsage {
    /// Stored bytes.
    pub bytes: u64,
    /// Stored payloads.
    pub objects: u64,
}

/// A stored payload's identity (everything but its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadRecord {
    /// `ep_` and 26 Crockford base32 characters.
    pub reference_id: String,
    /// The payload codec (`avro`).
    pub codec: String,
    /// Its length in bytes.
    pub size_bytes: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
}

/// Whether an upload stored new bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// A new row.
    Created(PayloadRecord),
    /// The same bytes were already stored in the namespace.
    Existing(PayloadRecord),
}

impl Stored {
    /// The stored payload's identity.
    pub fn record(&self) -> &PayloadRecord {
        match self {
            Stored::Created(r) | Stored::Existing(r) => r,
        }
    }
}

/// Where a payload's bytes live.
const PAYLOAD_DATA: BlobColumn<'static> = BlobColumn {
    table: "external_payloads",
    column: "data",
    key_column: "reference_id",
};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// `ep_` + a ULID: 48 bits of milliseconds and 80 random bits, in
/// Crockford base32 (the SDK's `ep_[0-9A-HJKMNP-TV-Z]{26}`).
fn reference_id(ms: i64, random: &[u8]) -> String {
    let mut value: u128 = u128::from(u64::try_from(ms).unwrap_or(0) & 0xFFFF_FFFF_FFFF) << 80;
    for (i, byte) in random.iter().take(10).enumerate() {
        value |= u128::from(*byte) << (72 - 8 * i);
    }
    let mut id = String::with_capacity(29);
    id.push_str("ep_");
    for i in (0..26).rev() {
        let index = ((value >> (5 * i)) & 0x1F) as usize;
        id.push(char::from(CROCKFORD[index]));
    }
    id
}

impl Store {
    /// `namespace`'s stored bytes and payloads.
    pub fn external_payload_usage(&self, namespace: &str) -> Result<PayloadUsage, Error> {
        let usage = self
            .conn
            .prepare_cached(
                "SELECT bytes, objects FROM external_payload_usage WHERE namespace = ?1",
            )?
            .query_row([namespace], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .optional()?;
        Ok(
            usage.map_or(PayloadUsage::default(), |(bytes, objects)| PayloadUsage {
                bytes: to_u64(bytes),
                objects: to_u64(objects),
            }),
        )
    }

    /// The stored payload with the same bytes in `namespace`, if any.
    pub fn find_external_payload(
        &self,
        namespace: &str,
        codec: &str,
        sha256: &str,
        size_bytes: u64,
    ) -> Result<Option<PayloadRecord>, Error> {
        let size = i64::try_from(size_bytes).unwrap_or(i64::MAX);
        Ok(self
            .conn
            .prepare_cached(
                "SELECT reference_id FROM external_payloads \
                 WHERE namespace = ?1 AND codec = ?2 AND sha256 = ?3 AND size_bytes = ?4",
            )?
            .query_row(params![namespace, codec, sha256, size], |r| r.get(0))
            .optional()?
            .map(|reference_id| PayloadRecord {
                reference_id,
                codec: codec.to_owned(),
                size_bytes,
                sha256: sha256.to_owned(),
            }))
    }

    /// Stores `data` in `namespace` under a new reference (call after
    /// [`Store::find_external_payload`] found none, in the same transaction).
    pub fn insert_external_payload(
        &self,
        namespace: &str,
        codec: &str,
        sha256: &str,
        data: &[u8],
    ) -> Result<PayloadRecord, Error> {
        self.insert_external_payload_from(
            namespace,
            codec,
            sha256,
            data.len() as u64,
            &mut &data[..],
        )
    }

    /// As [`Store::insert_external_payload`] for `size` bytes read from
    /// `source`: the row is inserted with a zero blob of that size, then
    /// filled through incremental blob I/O a chunk at a time, so a 16 MiB
    /// payload never sits whole in memory (SQLite's page cache holds what
    /// the transaction has not yet spilled to the WAL). `source` must yield
    /// exactly `size` bytes.
    pub fn insert_external_payload_from(
        &self,
        namespace: &str,
        codec: &str,
        sha256: &str,
        size: u64,
        source: &mut dyn std::io::Read,
    ) -> Result<PayloadRecord, Error> {
        let now = now_ms();
        let random: Vec<u8> = self
            .conn
            .prepare_cached("SELECT randomblob(10)")?
            .query_row([], |r| r.get(0))?;
        let record = PayloadRecord {
            reference_id: reference_id(now, &random),
            codec: codec.to_owned(),
            size_bytes: size,
            sha256: sha256.to_owned(),
        };
        let length = i64::try_from(size).unwrap_or(i64::MAX);
        let zeroes = ZeroBlob(i32::try_from(size).map_err(|_| {
            Error::Commit(format!(
                "an external payload of {size} bytes is too large to store"
            ))
        })?);
        self.conn
            .prepare_cached(
                "INSERT INTO external_payloads \
                 (reference_id, namespace, codec, size_bytes, sha256, data, created_at_ms, \
                  last_uploaded_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            )?
            .execute(params![
                record.reference_id,
                namespace,
                codec,
                length,
                sha256,
                zeroes,
                now
            ])?;
        let copied = self
            .conn
            .write_blob(PAYLOAD_DATA, &record.reference_id, source, size)
            .map_err(|e| match e {
                db::Error::Io(e) => {
                    Error::Commit(format!("copying an external payload into its row: {e}"))
                }
                e => Error::Database(e),
            })?;
        if copied != size {
            return Err(Error::Commit(format!(
                "an external payload of {size} bytes gave only {copied}"
            )));
        }
        Ok(record)
    }

    /// Marks payload `reference_id` as uploaded now: an upload that found
    /// the same bytes already stored restarts their orphan grace, so the
    /// reference it answers outlives the request that will name it.
    pub fn touch_external_payload(&self, reference_id: &str) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "UPDATE external_payloads SET last_uploaded_at_ms = ?2 WHERE reference_id = ?1",
            )?
            .execute(params![reference_id, now_ms()])?;
        Ok(())
    }

    /// Deletes at most `limit` payloads that nothing holds and whose last
    /// upload is older than the orphan grace before `now_ms`, oldest
    /// upload first (a walk of the partial `external_payloads_unreferenced`
    /// index), in one transaction; returns how many it deleted.
    pub fn expire_unreferenced_payloads(&self, now_ms: i64, limit: usize) -> Result<usize, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let deleted = tx
            .prepare_cached(
                "DELETE FROM external_payloads WHERE reference_id IN \
                 (SELECT reference_id FROM external_payloads \
                  WHERE ref_count = 0 AND last_uploaded_at_ms < ?1 \
                  ORDER BY last_uploaded_at_ms LIMIT ?2)",
            )?
            .execute(params![self.orphan_cutoff(now_ms), to_i64(limit)])?;
        tx.commit()?;
        Ok(deleted)
    }

    /// Uploads before this instant are past their orphan grace.
    pub(crate) fn orphan_cutoff(&self, now_ms: i64) -> i64 {
        let grace = to_i64(self.config.external_payload_orphan_grace.as_millis());
        now_ms.saturating_sub(grace)
    }

    /// How many holders (runs, streams, schedules) hold payload
    /// `reference_id` of `namespace`; `None` when it is not stored.
    pub fn external_payload_holders(
        &self,
        namespace: &str,
        reference_id: &str,
    ) -> Result<Option<u64>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT ref_count FROM external_payloads WHERE reference_id = ?1 AND namespace = ?2",
            )?
            .query_row([reference_id, namespace], |r| r.get::<_, i64>(0))
            .optional()?
            .map(to_u64))
    }

    /// Up to `len` bytes of payload `reference_id`'s data from `offset`
    /// (incremental blob I/O: only those bytes are read); `None` when the
    /// payload is gone, empty at or past its end.
    pub fn external_payload_chunk(
        &self,
        reference_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, Error> {
        self.conn
            .read_blob_chunk(PAYLOAD_DATA, reference_id, offset, len)
            .map_err(|e| match e {
                db::Error::Io(e) => Error::Commit(format!("reading an external payload: {e}")),
                e => Error::Database(e),
            })
    }

    /// The payload `reference_id` of `namespace` with its bytes; `None`
    /// when no such reference exists in that namespace.
    pub fn external_payload(
        &self,
        namespace: &str,
        reference_id: &str,
    ) -> Result<Option<(PayloadRecord, Vec<u8>)>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT codec, size_bytes, sha256, data FROM external_payloads \
                 WHERE reference_id = ?1 AND namespace = ?2",
            )?
            .query_row([reference_id, namespace], |r| {
                Ok((
                    PayloadRecord {
                        reference_id: reference_id.to_owned(),
                        codec: r.get(0)?,
                        size_bytes: to_u64(r.get(1)?),
                        sha256: r.get(2)?,
                    },
                    r.get(3)?,
                ))
            })
            .optional()?)
    }

    /// The identity of payload `reference_id` of `namespace`, without reading its bytes.
    pub fn external_payload_record(
        &self,
        namespace: &str,
        reference_id: &str,
    ) -> Result<Option<PayloadRecord>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT codec, size_bytes, sha256 FROM external_payloads \
                 WHERE reference_id = ?1 AND namespace = ?2",
            )?
            .query_row([reference_id, namespace], |r| {
                Ok(PayloadRecord {
                    reference_id: reference_id.to_owned(),
                    codec: r.get(0)?,
                    size_bytes: to_u64(r.get(1)?),
                    sha256: r.get(2)?,
                })
            })
            .optional()?)
    }
}

/// Releases every payload run `run` holds (retention pruned its history)
/// and deletes those nothing else holds whose last upload is before
/// `uploaded_before_ms`; the rest wait for the orphan sweep. Call inside
/// the prune's transaction. Returns how many payloads it deleted.
pub(crate) fn release_run_payloads(
    conn: &Connection,
    run: i64,
    uploaded_before_ms: i64,
) -> Result<usize, Error> {
    let released: Vec<String> = conn
        .prepare_cached(
            "DELETE FROM external_payload_refs WHERE holder = 'run' AND holder_id = ?1 \
             RETURNING reference_id",
        )?
        .query_map([run], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut deleted = 0;
    for reference_id in released {
        deleted += conn
            .prepare_cached(
                "DELETE FROM external_payloads WHERE reference_id = ?1 \
                 AND ref_count = 0 AND last_uploaded_at_ms < ?2",
            )?
            .execute(params![reference_id, uploaded_before_ms])?;
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_ids_match_the_sdk_pattern() {
        let id = reference_id(1_764_000_000_000, &[0xFF; 10]);
        assert_eq!(id.len(), 29);
        assert!(id.starts_with("ep_"));
        assert!(id[3..]
            .bytes()
            .all(|b| CROCKFORD.contains(&b) && !b"ILOU".contains(&b)));
        assert_ne!(id, reference_id(1_764_000_000_000, &[0xFE; 10]));
        assert!(reference_id(1, &[0; 10]) < reference_id(2, &[0; 10]));
    }

    #[test]
    fn usage_follows_rows_and_the_same_bytes_are_stored_once() {
        let store = Store::open_in_memory(crate::store::config::StoreConfig::default()).unwrap();
        assert_eq!(
            store.external_payload_usage("a").unwrap(),
            PayloadUsage::default()
        );
        let first = store
            .insert_external_payload("a", "avro", "ab", b"12345")
            .unwrap();
        store
            .insert_external_payload("a", "avro", "cd", b"123")
            .unwrap();
        store
            .insert_external_payload("b", "avro", "ab", b"12345")
            .unwrap();
        assert_eq!(
            store.external_payload_usage("a").unwrap(),
            PayloadUsage {
                bytes: 8,
                objects: 2
            }
        );
        assert_eq!(
            store.find_external_payload("a", "avro", "ab", 5).unwrap(),
            Some(first.clone())
        );
        assert!(store
            .insert_external_payload("a", "avro", "ab", b"12345")
            .is_err());
        let (record, data) = store
            .external_payload("a", &first.reference_id)
            .unwrap()
            .unwrap();
        assert_eq!((record, data), (first.clone(), b"12345".to_vec()));
        assert!(store
            .external_payload("b", &first.reference_id)
            .unwrap()
            .is_none());
    }
}
