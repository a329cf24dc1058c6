//! An S3 server that keeps its objects in memory, for throughput measurements and for objects a directory
//! cannot hold (any keys, any ETags).

use std::sync::Arc;

use bytes::Bytes;
use kubetrain_initializer::s3_server::S3Server;

use crate::loopback::to_hex;

/// An S3 server that keeps its objects in memory and sends them in 1 MiB slices without copying:
/// for throughput measurements, where the server must not be the bottleneck.
///
/// Serves `ListObjectsV2`, `HeadObject` and `GetObject` (with ranges) of one bucket, with the
/// same signature checks as [`S3Server`].
pub struct MemoryS3Server(S3Server);

impl MemoryS3Server {
    /// Starts a server whose `bucket` holds `objects` (key, content), each with the MD5 of its
    /// content as ETag.
    pub fn start(
        bucket: &str,
        objects: Vec<(String, Bytes)>,
        access_key: &str,
        secret_key: &str,
    ) -> std::io::Result<Self> {
        use md5::Digest as _;
        let objects = objects
            .into_iter()
            .map(|(key, data)| {
                let etag = to_hex(&md5::Md5::digest(&data));
                (key, data, etag)
            })
            .collect();
        Self::start_with_etags(bucket, objects, access_key, secret_key)
    }

    /// Starts a server whose `bucket` holds `objects` (key, content, ETag): any keys (folder
    /// markers, `..`, empty segments) and any ETags (multipart `<md5>-<N>`, or one that does
    /// not match the content).
    pub fn start_with_etags(
        bucket: &str,
        objects: Vec<(String, Bytes, String)>,
        access_key: &str,
        secret_key: &str,
    ) -> std::io::Result<Self> {
        let objects = objects
            .into_iter()
            .map(|(key, data, etag)| (key, MemoryObject { data, etag }))
            .collect();
        let store = MemoryS3 {
            bucket: bucket.to_string(),
            objects: Arc::new(objects),
            modified: std::time::SystemTime::now(),
        };
        S3Server::with_backend(store, access_key, secret_key).map(Self)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.0.endpoint()
    }

    /// The accepted access key id.
    pub fn access_key(&self) -> &str {
        self.0.access_key()
    }

    /// The accepted secret key.
    pub fn secret_key(&self) -> &str {
        self.0.secret_key()
    }
}

struct MemoryObject {
    data: Bytes,
    etag: String,
}

struct MemoryS3 {
    bucket: String,
    objects: Arc<std::collections::BTreeMap<String, MemoryObject>>,
    modified: std::time::SystemTime,
}

impl MemoryS3 {
    fn object(&self, bucket: &str, key: &str) -> s3s::S3Result<&MemoryObject> {
        if bucket != self.bucket {
            return Err(s3s::s3_error!(NoSuchBucket));
        }
        self.objects
            .get(key)
            .ok_or_else(|| s3s::s3_error!(NoSuchKey))
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl s3s::S3 for MemoryS3 {
    async fn list_objects_v2(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectsV2Input>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListObjectsV2Output>> {
        let input = req.input;
        if input.bucket != self.bucket {
            return Err(s3s::s3_error!(NoSuchBucket));
        }
        let prefix = input.prefix.clone().unwrap_or_default();
        let contents: Vec<s3s::dto::Object> = self
            .objects
            .range(prefix.clone()..)
            .take_while(|(key, _)| key.starts_with(&prefix))
            .map(|(key, object)| s3s::dto::Object {
                key: Some(key.clone()),
                size: Some(to_i64(object.data.len())),
                e_tag: Some(s3s::dto::ETag::Strong(object.etag.clone())),
                last_modified: Some(self.modified.into()),
                ..Default::default()
            })
            .collect();
        let output = s3s::dto::ListObjectsV2Output {
            key_count: Some(i32::try_from(contents.len()).unwrap_or(i32::MAX)),
            is_truncated: Some(false),
            contents: (!contents.is_empty()).then_some(contents),
            name: Some(input.bucket),
            prefix: input.prefix,
            ..Default::default()
        };
        Ok(s3s::S3Response::new(output))
    }

    async fn head_object(
        &self,
        req: s3s::S3Request<s3s::dto::HeadObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::HeadObjectOutput>> {
        let object = self.object(&req.input.bucket, &req.input.key)?;
        Ok(s3s::S3Response::new(s3s::dto::HeadObjectOutput {
            content_length: Some(to_i64(object.data.len())),
            e_tag: Some(s3s::dto::ETag::Strong(object.etag.clone())),
            last_modified: Some(self.modified.into()),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectOutput>> {
        let object = self.object(&req.input.bucket, &req.input.key)?;
        let len = object.data.len() as u64;
        let (range, content_range) = match &req.input.range {
            None => (0..len, None),
            Some(range) => {
                let r = range.check(len).map_err(|_| s3s::s3_error!(InvalidRange))?;
                let text = format!("bytes {}-{}/{len}", r.start, r.end.saturating_sub(1));
                (r, Some(text))
            }
        };
        let start = usize::try_from(range.start).unwrap_or(usize::MAX);
        let end = usize::try_from(range.end).unwrap_or(usize::MAX);
        let body = object.data.slice(start..end);
        const SLICE: usize = 1 << 20;
        let slices: Vec<Result<Bytes, std::io::Error>> = (0..body.len())
            .step_by(SLICE)
            .map(|at| Ok(body.slice(at..(at + SLICE).min(body.len()))))
            .collect();
        Ok(s3s::S3Response::new(s3s::dto::GetObjectOutput {
            body: Some(s3s::dto::StreamingBlob::wrap(futures_util::stream::iter(
                slices,
            ))),
            content_length: Some(to_i64(end - start)),
            content_range,
            e_tag: Some(s3s::dto::ETag::Strong(object.etag.clone())),
            last_modified: Some(self.modified.into()),
            ..Default::default()
        }))
    }
}
