//! Reading and writing the Lease: every write a merge patch carrying the resourceVersion the
//! election read, which the apiserver takes as a precondition (409 Conflict when the Lease has
//! changed since), or a create (409 when another replica created it first).
//!
//! A merge patch, not a PUT: the chart's Role grants `get`, `create` and `patch` on Leases, as
//! it did for kube-lease-manager, and a patch naming a resourceVersion is refused exactly as a
//! replace with a stale one is.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use thiserror::Error;

use super::election::Record;

/// How a read or write of the Lease failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Another write landed first (the resourceVersion moved, or the Lease was created).
    #[error("another write of the lease landed first")]
    Conflict,
    /// Anything else: the apiserver unreachable, RBAC, a missing namespace.
    #[error("{0}")]
    Other(String),
}

/// What a write of the Lease does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Name this replica again with a fresh renew time.
    Renew,
    /// Name this replica as the new holder: a new acquire time and `transitions`.
    Take {
        /// The transitions to write (one more than read).
        transitions: i32,
    },
    /// Name nobody, with a lease of one second (a graceful stop).
    Release,
}

/// Where the election reads and writes its Lease: the apiserver, or a fake in the tests.
pub trait LeaseStore: Send + Sync + 'static {
    /// The Lease, or `None` when there is none.
    fn get(&self) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;
    /// Creates the Lease naming this replica.
    fn create(&self) -> impl Future<Output = Result<Record, StoreError>> + Send;
    /// Writes the Lease if its resourceVersion is still `version`.
    fn write(
        &self,
        version: &str,
        write: Write,
    ) -> impl Future<Output = Result<Record, StoreError>> + Send;
}

/// The Lease on the apiserver, written as this replica's own field manager.
pub struct KubeLeases {
    /// The Leases of the namespace.
    pub api: Api<Lease>,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// The lease duration this replica writes.
    pub duration_seconds: i32,
    /// This replica's field manager.
    pub field_manager: String,
}

impl LeaseStore for KubeLeases {
    async fn get(&self) -> Result<Option<Record>, StoreError> {
        self.api
            .get_opt(&self.name)
            .await
            .map(|lease| lease.map(|lease| record(&lease)))
            .map_err(store_error)
    }

    async fn create(&self) -> Result<Record, StoreError> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration_seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let params = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        };
        self.api
            .create(&params, &lease)
            .await
            .map(|lease| record(&lease))
            .map_err(store_error)
    }

    async fn write(&self, version: &str, write: Write) -> Result<Record, StoreError> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let spec = match write {
            Write::Renew => json!({
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_seconds,
                "renewTime": now,
            }),
            Write::Take { transitions } => json!({
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": transitions,
            }),
            Write::Release => json!({
                "holderIdentity": null,
                "leaseDurationSeconds": 1,
                "renewTime": now,
            }),
        };
        // The resourceVersion in the body is the precondition.
        let patch = json!({"metadata": {"resourceVersion": version}, "spec": spec});
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        self.api
            .patch(&self.name, &params, &Patch::Merge(patch))
            .await
            .map(|lease| record(&lease))
            .map_err(store_error)
    }
}

/// What the election reads of a Lease.
pub fn record(lease: &Lease) -> Record {
    let spec = lease.spec.as_ref();
    Record {
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
        holder: spec
            .and_then(|spec| spec.holder_identity.clone())
            .filter(|holder| !holder.is_empty()),
        duration: spec
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0)
            .map(Duration::from_secs),
        transitions: spec.and_then(|spec| spec.lease_transitions).unwrap_or(0),
    }
}

fn store_error(error: kube::Error) -> StoreError {
    match error {
        kube::Error::Api(status) if status.code == 409 => StoreError::Conflict,
        other => StoreError::Other(other.to_string()),
    }
}
