//! The start-up step of the `CAPSTAN_BASE_TOOLS` and plan-token settings: the base platform
//! tools, and the change path's keys and ledger.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_core::control_plane::ControlPlane;
use capstan_platform::{ChangePath, PlanKeys, PlanLedger};
use tracing::{info, warn};

use super::RunError;
use crate::composition::composer::{BaseToolsSetup, ProjectComposer};
use crate::config::{BaseToolSettings, BaseToolsMode};

/// `composer` with the base platform tools, when they are on and a control plane is known;
/// the change path with them in `auto` mode.
pub(super) fn with_base_tools(
    composer: ProjectComposer,
    settings: BaseToolSettings,
    plane: Option<&ControlPlane>,
) -> Result<ProjectComposer, RunError> {
    let BaseToolSettings {
        base_tools,
        plan_token_key,
        plan_token_keys_file,
        plan_ledger,
        plan_token_ttl_seconds,
    } = settings;
    let plane = match (plane, base_tools) {
        (_, BaseToolsMode::Off) => {
            info!("base platform tools are off (CAPSTAN_BASE_TOOLS=off)");
            return Ok(composer);
        }
        (None, _) => {
            info!(
                "base platform tools are not composed: no control plane is known (no \
                 kubeconfig, not in a pod)"
            );
            return Ok(composer);
        }
        (Some(plane), _) => plane,
    };
    let change_path = if base_tools == BaseToolsMode::Auto {
        let keys = plan_keys(plan_token_key, plan_token_keys_file)?;
        let ttl = Duration::from_secs(plan_token_ttl_seconds);
        Some(change_path(keys, plan_ledger, ttl)?)
    } else {
        None
    };
    info!(
        url_template = plane.url_template().unwrap_or("(the kubeconfig's cluster)"),
        change_path = change_path.is_some(),
        "base platform tools are composed for callers with a token, acting as the caller"
    );
    Ok(composer.with_base_tools(BaseToolsSetup {
        plane: plane.clone(),
        change_path,
    }))
}

/// The change path: plan-token keys and the ledger of applied tokens (a file with
/// `CAPSTAN_PLAN_LEDGER`, else in memory).
fn change_path(
    keys: PlanKeys,
    ledger_file: Option<PathBuf>,
    ttl: Duration,
) -> Result<ChangePath, RunError> {
    let ledger = match &ledger_file {
        Some(path) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            PlanLedger::open(path, now)?
        }
        None => PlanLedger::in_memory()?,
    };
    info!(
        ledger = ledger.id(),
        file = ledger_file.as_ref().map(|p| p.display().to_string()),
        "plan tokens are applied once, by the caller who planned, through this ledger"
    );
    Ok(ChangePath::with_system_clock(
        Arc::new(keys),
        Arc::new(ledger),
        ttl,
    ))
}

/// The plan-token keys: `PLAN_TOKEN_KEY`, a key file, or one drawn for this process.
fn plan_keys(key: Option<String>, file: Option<PathBuf>) -> Result<PlanKeys, RunError> {
    match (key, file) {
        (Some(_), Some(_)) => Err(RunError::Settings(
            "PLAN_TOKEN_KEY and PLAN_TOKEN_KEYS_FILE are both set: use one (the file for \
             rotation)"
                .into(),
        )),
        (Some(key), None) => Ok(PlanKeys::from_secret(&key)?),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                RunError::Settings(format!("PLAN_TOKEN_KEYS_FILE {}: {e}", path.display()))
            })?;
            Ok(PlanKeys::from_key_file(&text)?)
        }
        (None, None) => {
            let keys = PlanKeys::generate()?;
            warn!(
                key = keys.signing_id(),
                "no PLAN_TOKEN_KEY or PLAN_TOKEN_KEYS_FILE: plan tokens are signed with a key \
                 drawn for this process; they die with it"
            );
            Ok(keys)
        }
    }
}
