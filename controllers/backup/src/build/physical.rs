//! What a physical run's Job adds to a logical run's: the tool's container, from the server's
//! own image (so its `mariadb-backup` is the server's version), reading the server's data claim
//! read-only on the server's node, and writing its stream into the pipe the agent stores
//! ([`visitors_agent_contract::physical`]).

use controller_common::agent_job::{
    CA_MOUNT, CA_VOLUME, DatabaseAccess, ServerTls, TMP_VOLUME, container_security_context, env_from_secret,
    read_only_mount,
};
use controller_common::mysql_server::{MYSQL_GROUP, MYSQL_UID};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, PodAffinity, PodAffinityTerm,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use visitors_agent_contract::env as agent_env;
use visitors_agent_contract::physical::{DIR, PIPE, tool_command};
use visitors_api::labels::names;
use visitors_api::visitors_app::{MYSQL_PORT, secret_keys, tls_keys};

/// The tool's container in a physical run's Job.
pub const TOOL_CONTAINER: &str = "backup-tool";
const PIPE_VOLUME: &str = "physical";
const DATA_VOLUME: &str = "mysql-data";
/// Where the tool finds the server's data directory: where the server's pod mounts it.
const DATA_MOUNT: &str = "/var/lib/mysql";
/// Where the tool keeps what it writes besides the stream.
const TOOL_TARGET: &str = "/var/run/visitors-physical/target";

/// `job`, a physical run's agent Job reading `pod` at `host` as `access` says, with the tool's
/// container beside the agent, and on `pod`'s node: a ReadWriteOnce claim is mounted by pods
/// of one node only.
pub fn with_backup_tool(mut job: Job, host: &str, access: &DatabaseAccess, pod: &str) -> Job {
    let spec = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()).expect("an agent Job has a pod template");
    let volumes = spec.volumes.get_or_insert_default();
    volumes.push(Volume {
        name: PIPE_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    });
    volumes.push(Volume {
        name: DATA_VOLUME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: names::mysql_data_claim(pod),
            read_only: Some(true),
        }),
        ..Volume::default()
    });
    spec.containers[0].volume_mounts.get_or_insert_default().push(writable_mount(PIPE_VOLUME, DIR));
    spec.containers.push(tool_container(host, access));
    spec.affinity = Some(on_the_node_of(pod));
    job
}

fn tool_container(host: &str, access: &DatabaseAccess) -> Container {
    let mut mounts = vec![
        writable_mount(PIPE_VOLUME, DIR),
        read_only_mount(DATA_VOLUME, DATA_MOUNT),
        writable_mount(TMP_VOLUME, "/tmp"),
    ];
    if matches!(access.tls, ServerTls::Verified { .. }) {
        mounts.push(read_only_mount(CA_VOLUME, CA_MOUNT));
    }
    Container {
        name: TOOL_CONTAINER.into(),
        image: Some(access.servers.image.clone()),
        command: Some(tool_command(PIPE, &tool_args(host, &access.tls))),
        // mariadb-backup reads the password the way every MariaDB client does.
        env: Some(vec![env_from_secret(agent_env::MYSQL_PWD, &access.credentials_secret, secret_keys::ROOT_PASSWORD)]),
        volume_mounts: Some(mounts),
        // The data directory's owner, as in the server's own pod.
        security_context: Some(SecurityContext {
            run_as_user: Some(MYSQL_UID),
            run_as_group: Some(MYSQL_GROUP),
            ..container_security_context()
        }),
        ..Container::default()
    }
}

/// `mariadb-backup`'s arguments: the server by the name its certificate carries, as root.
fn tool_args(host: &str, tls: &ServerTls) -> Vec<String> {
    let mut args = vec![
        "--backup".to_string(),
        "--stream=mbstream".into(),
        format!("--host={host}"),
        format!("--port={MYSQL_PORT}"),
        "--user=root".into(),
        format!("--datadir={DATA_MOUNT}"),
        format!("--target-dir={TOOL_TARGET}"),
    ];
    if let ServerTls::Verified { check_name, .. } = tls {
        args.push(format!("--ssl-ca={CA_MOUNT}/{}", tls_keys::CA));
        if *check_name {
            args.push("--ssl-verify-server-cert".into());
        }
    }
    args
}

fn writable_mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount { name: volume.into(), mount_path: path.into(), ..VolumeMount::default() }
}

fn on_the_node_of(pod: &str) -> Affinity {
    let selector = LabelSelector {
        match_labels: Some([("statefulset.kubernetes.io/pod-name".to_string(), pod.to_string())].into()),
        ..LabelSelector::default()
    };
    Affinity {
        pod_affinity: Some(PodAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(selector),
                topology_key: "kubernetes.io/hostname".into(),
                ..PodAffinityTerm::default()
            }]),
            ..PodAffinity::default()
        }),
        ..Affinity::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;
    use crate::build::job::backup_job;
    use crate::read_from::{ReadFrom, choose};
    use controller_common::agent_job::{AgentInputs, MysqlServers};
    use controller_common::testing::agent_contract_of;
    use visitors_agent_contract::Command;
    use visitors_api::backup::BackupMethod;

    fn access(image: &str, tls: ServerTls) -> DatabaseAccess {
        let servers = MysqlServers {
            wanted: 3,
            primary: Some("ex-mysql-0".into()),
            replicas: vec![("ex-mysql-2".into(), Some(0))],
            image: image.into(),
        };
        DatabaseAccess { credentials_secret: "ex-mysql-credentials".into(), tls, servers }
    }

    fn physical_job(read_from: &ReadFrom, access: &DatabaseAccess) -> Job {
        let mut run = run();
        run.spec.method = Some(BackupMethod::Physical);
        backup_job(
            &run,
            &AgentInputs { image: "registry/visitors-operator:1.0".into(), ..Default::default() },
            access,
            read_from,
        )
    }

    fn replica(access: &DatabaseAccess) -> ReadFrom {
        choose(Default::default(), "ex", "shop", &access.servers).into_ready::<()>().expect("a replica")
    }

    #[test]
    fn a_physical_run_runs_the_servers_own_tool_on_its_data_claim_beside_the_agent() {
        let tls = ServerTls::Verified { ca_secret: "ex-mysql-ca".into(), check_name: true };
        let access = access("mariadb:10.11.9", tls);
        let job = physical_job(&replica(&access), &access);
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let [agent, tool] = &pod.containers[..] else { panic!("two containers: {:?}", pod.containers) };
        assert_eq!((tool.name.as_str(), tool.image.as_deref()), (TOOL_CONTAINER, Some("mariadb:10.11.9")));
        let command = tool.command.clone().unwrap();
        assert_eq!(&command[..2], ["sh", "-c"]);
        let host = "ex-mysql-2.ex-mysql-headless.shop.svc";
        for arg in [
            "--backup",
            "--stream=mbstream",
            &format!("--host={host}"),
            "--user=root",
            "--datadir=/var/lib/mysql",
            "--ssl-ca=/etc/visitors/mysql-ca/ca.crt",
            "--ssl-verify-server-cert",
        ] {
            assert!(command.iter().any(|a| a == arg), "{arg} in {command:?}");
        }
        let password = tool.env.as_ref().unwrap().iter().find(|e| e.name == "MYSQL_PWD").unwrap();
        assert_eq!(password.value, None, "the password only by reference");
        let mounts = tool.volume_mounts.clone().unwrap();
        let data = mounts.iter().find(|m| m.mount_path == "/var/lib/mysql").unwrap();
        assert_eq!(data.read_only, Some(true));
        let claim = pod.volumes.iter().flatten().find(|v| v.name == data.name).unwrap();
        assert_eq!(claim.persistent_volume_claim.as_ref().unwrap().claim_name, "data-ex-mysql-2");
        assert!(
            mounts.iter().any(|m| m.mount_path == DIR)
                && agent.volume_mounts.iter().flatten().any(|m| m.mount_path == DIR)
        );
        assert_eq!(tool.security_context.as_ref().unwrap().run_as_user, Some(MYSQL_UID));
        let affinity = pod.affinity.as_ref().unwrap().pod_affinity.as_ref().unwrap();
        let term = &affinity.required_during_scheduling_ignored_during_execution.as_ref().unwrap()[0];
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        let labels = term.label_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
        assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "ex-mysql-2");

        // The agent stores the pipe's stream, and reads the same server by the same name.
        let mut agent_only = job.clone();
        agent_only.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers.truncate(1);
        let Command::Backup(args) = agent_contract_of(&agent_only).remove(0).command else { panic!("a backup") };
        assert_eq!(args.physical_stream.as_deref(), Some(PIPE));
        let host_env = agent.env.as_ref().unwrap().iter().find(|e| e.name == "MYSQL_HOST").unwrap();
        assert_eq!(host_env.value.as_deref(), Some(host));
    }

    #[test]
    fn a_physical_run_of_the_primary_reads_it_by_its_own_name_not_the_client_service() {
        let access = access("mariadb:10.11", ServerTls::Disabled);
        let primary = choose(visitors_api::backup::BackupFrom::Primary, "ex", "shop", &access.servers)
            .into_ready::<()>()
            .unwrap();
        assert_eq!(primary.host, "ex-mysql.shop.svc", "a logical run would read the client Service");
        let job = physical_job(&primary, &access);
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let tool = &pod.containers[1].command.clone().unwrap();
        assert!(tool.iter().any(|a| a == "--host=ex-mysql-0.ex-mysql-headless.shop.svc"), "{tool:?}");
        assert!(tool.iter().all(|a| !a.starts_with("--ssl")), "no TLS options for a server without TLS: {tool:?}");
        let volumes = pod.volumes.iter().flatten();
        assert!(volumes.filter_map(|v| v.persistent_volume_claim.as_ref()).any(|c| c.claim_name == "data-ex-mysql-0"));
    }
}
