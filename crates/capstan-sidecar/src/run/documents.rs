//! The start-up step of the `CAPABILITY_*` settings: the projects' control plane, when one is
//! known, and the reader of their capability documents.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_compose::source::CachedSource;
use capstan_compose::source::CrdSource;
use capstan_compose::source::FixtureSource;
use capstan_compose::source::HttpSource;
use capstan_compose::source::ProjectDocuments;
use capstan_compose::source::Uncached;
use capstan_compose::source::WatchCounts;
use capstan_compose::source::WatchedCluster;
use capstan_core::control_plane::ControlPlane;

use super::RunError;
use crate::config::{DocumentSettings, SourceKind};

/// What the document settings build: the control plane when one is known, the reader of
/// projects' documents, and how often live sessions re-read them.
pub(super) struct Documents {
    pub(super) source: SourceKind,
    pub(super) plane: Option<ControlPlane>,
    pub(super) reader: Arc<dyn ProjectDocuments>,
    pub(super) watched: Option<Watched>,
    pub(super) refresh: Option<Duration>,
}

/// The control plane and the document reader of the `CAPABILITY_*` settings.
pub(super) async fn document_settings(settings: DocumentSettings) -> Result<Documents, RunError> {
    let DocumentSettings {
        source,
        docs_fixture,
        provider_url,
        provider_max_bytes,
        crd_url_template,
        kubeconfig,
        crd_cache_ttl_seconds,
        crd_cache_capacity,
        refresh_seconds,
    } = settings;
    let plane = control_plane(source, kubeconfig, crd_url_template).await?;
    let (reader, watched) = match source {
        SourceKind::Fixture => (fixture_reader(docs_fixture)?, None),
        SourceKind::Http => (http_reader(provider_url, provider_max_bytes)?, None),
        SourceKind::Crd => crd_reader(
            plane.as_ref(),
            Duration::from_secs(crd_cache_ttl_seconds),
            crd_cache_capacity,
        )?,
    };
    Ok(Documents {
        source,
        plane,
        reader,
        watched,
        refresh: (refresh_seconds > 0).then(|| Duration::from_secs(refresh_seconds)),
    })
}

/// The projects' control planes: required by the crd source, otherwise known when a
/// kubeconfig is given or the sidecar runs in a pod.
async fn control_plane(
    source: SourceKind,
    kubeconfig: Option<PathBuf>,
    url_template: Option<String>,
) -> Result<Option<ControlPlane>, RunError> {
    let kube = match (source, kubeconfig) {
        (SourceKind::Crd, kubeconfig) => Some(kube_config(kubeconfig).await?),
        (_, Some(path)) => Some(kube_config(Some(path)).await?),
        (_, None) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            Some(kube_config(None).await?)
        }
        (_, None) => None,
    };
    Ok(kube.map(|kube| ControlPlane::new(kube, url_template)))
}

/// The watched crd source's counts and first sync, when it is the source.
pub(super) type Watched = (Arc<WatchCounts>, tokio::sync::watch::Receiver<bool>);

/// The fixture source (`CAPABILITY_SOURCE=fixture`).
fn fixture_reader(path: Option<PathBuf>) -> Result<Arc<dyn ProjectDocuments>, RunError> {
    let path = path.ok_or_else(|| {
        RunError::Settings(
            "CAPABILITY_SOURCE=fixture needs CAPABILITY_DOCS_FIXTURE (--docs-fixture)".into(),
        )
    })?;
    if !path.is_file() {
        return Err(RunError::Settings(format!(
            "fixture {} is not a readable file",
            path.display()
        )));
    }
    Ok(Arc::new(Uncached::new(Arc::new(FixtureSource::new(path)))))
}

/// The provider API source (`CAPABILITY_SOURCE=http`).
fn http_reader(
    url: Option<String>,
    max_bytes: usize,
) -> Result<Arc<dyn ProjectDocuments>, RunError> {
    let url = url.ok_or_else(|| {
        RunError::Settings(
            "CAPABILITY_SOURCE=http needs CAPABILITY_PROVIDER_URL (--provider-url)".into(),
        )
    })?;
    let source = HttpSource::new(&url, max_bytes).map_err(RunError::Provider)?;
    Ok(Arc::new(Uncached::new(Arc::new(source))))
}

/// The crd source: with a URL template each project's plane listed behind a cache; without
/// one, one watch serves every project (capstan-compose `source/crd_watch.rs`), ready once it
/// has listed.
fn crd_reader(
    plane: Option<&ControlPlane>,
    cache_ttl: Duration,
    capacity: usize,
) -> Result<(Arc<dyn ProjectDocuments>, Option<Watched>), RunError> {
    let plane = plane
        .cloned()
        .ok_or_else(|| RunError::Settings("CAPABILITY_SOURCE=crd needs a control plane".into()))?;
    let Some(cluster) = plane.cluster_config() else {
        let cached = CachedSource::new(
            Arc::new(CrdSource::from_plane(plane).with_capacity(capacity)),
            cache_ttl,
            capacity,
        );
        return Ok((Arc::new(cached), None));
    };
    let watched = WatchedCluster::connect(cluster)
        .map_err(|e| RunError::Settings(format!("the crd source's cluster: {e}")))?;
    let sync = (watched.counts(), watched.first_sync());
    Ok((Arc::new(watched), Some(sync)))
}

/// The control plane's configuration: the given kubeconfig, or the inferred one (in a pod,
/// the service account).
async fn kube_config(kubeconfig: Option<PathBuf>) -> Result<kube::Config, RunError> {
    match kubeconfig {
        Some(path) => {
            let error = |message: String| RunError::Kubeconfig {
                path: path.display().to_string(),
                message,
            };
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&path).map_err(|e| error(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| error(e.to_string()))
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| RunError::Kubeconfig {
                path: "(none given, none inferred)".into(),
                message: e.to_string(),
            }),
    }
}
