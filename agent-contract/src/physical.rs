//! How a physical backup's two containers meet: the tool's (the server's own image, so its
//! `mariadb-backup` is the server's version) and the agent's share a volume holding a named
//! pipe, which the agent makes and reads (`backup --physical-stream`), and beside it the tool's
//! exit status and messages, which the agent reads once the stream ends.

/// Where both containers mount the volume.
pub const DIR: &str = "/var/run/visitors-physical";
/// The pipe the tool writes its stream into.
pub const PIPE: &str = "/var/run/visitors-physical/mbstream";

/// The tool container's command: waits for the agent's pipe, runs `mariadb-backup` with
/// `tool_args` into it, and records its exit status in `<pipe>.status` and its messages in
/// `<pipe>.log`. An image without the tool records that instead and closes the pipe, so the
/// agent does not wait for a stream that never comes.
pub fn tool_command(pipe: &str, tool_args: &[String]) -> Vec<String> {
    const SCRIPT: &str = r#"pipe=$1; shift
until [ -p "$pipe" ]; do sleep 0.1; done
if ! command -v mariadb-backup >/dev/null 2>&1; then
    echo "the server's image has no mariadb-backup" > "$pipe.log"
    echo 127 > "$pipe.status"
    : > "$pipe"
    exit 127
fi
mariadb-backup "$@" > "$pipe" 2> "$pipe.log"
status=$?
echo "$status" > "$pipe.status"
cat "$pipe.log" >&2
exit "$status""#;
    let mut command: Vec<String> = ["sh", "-c", SCRIPT, "physical-backup", pipe].map(String::from).to_vec();
    command.extend(tool_args.iter().cloned());
    command
}
