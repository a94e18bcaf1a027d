# Sourced by the install scripts of the tests (collectors/, pictures/, python/).
#
# install_dir VARIABLE NAME: sets dir to $VARIABLE (default <repo>/target/NAME) and venv to
# $dir/venv; creates dir and holds its lock file until the script exits, so that test
# processes installing at once take turns.
install_dir() {
    local repo
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    dir="${!1:-$repo/target/$2}"
    venv="$dir/venv"
    mkdir -p "$dir"
    exec 9>"$dir/install.lock"
    flock 9
}
