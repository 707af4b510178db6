#!/bin/sh
# The wheel build's compiler and linker launcher (CMakeLists.txt sets it under scikit-build-core). pip
# shows a build backend's output only with -v, so a build of minutes showed nothing but "Building wheel
# ... still running". Each compile and link names its file on the terminal pip runs in (/dev/tty), when
# the build has one (none in CI, a container without -t or a daemon: then nothing is printed anywhere),
# then runs the command unchanged, with its own exit status. KVSTORE_BUILD_PROGRESS=0 turns it off.
#
#   build_progress.sh compile|link START_FILE COMMAND...   (START_FILE: when the configure ran, in seconds
#   build_progress.sh note START_FILE TEXT...              since 1970; written by CMakeLists.txt)
mode=$1
start=$(cat "$2" 2>/dev/null) || start=""
shift 2
# $1: how the line starts: \n below pip's "Building wheel ..." line (the first note), else \r (over the
# spinner character pip writes at column 0 after each line of ours).
say() {
  elapsed=$(($(date +%s) - ${start:-$(date +%s)}))
  { printf "$1"'[kvstore-llm build %d:%02d] %s\n' $((elapsed / 60)) $((elapsed % 60)) "$2" >/dev/tty; } 2>/dev/null
}
if [ "${KVSTORE_BUILD_PROGRESS:-1}" = 0 ]; then
  [ "$mode" = note ] && exit 0
  exec "$@"
fi
case "$mode" in
  note)
    say '\n' "$*"
    exit 0
    ;;
  compile | link)
    flag=-c verb=compiling
    [ "$mode" = link ] && flag=-o verb=linking
    what=""
    previous=""
    for arg in "$@"; do  # (the file is the argument after -c for a compile, after -o for a link)
      [ "$previous" = "$flag" ] && what=$arg
      previous=$arg
    done
    [ -n "$what" ] && say '\r' "$verb ${what##*/csrc/}"
    ;;
  *)
    echo "build_progress.sh: unknown mode '$mode' (compile, link or note)" >&2
    exit 2
    ;;
esac
exec "$@"
