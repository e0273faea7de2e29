#!/bin/bash
# test_errors.sh: every mistake gets a one-line message naming it (the file and line for a
# hostfile), nothing on stdout, and exit status 2 (usage), 127 (program not found) or 126 (not
# executable); nothing is started.
. "$(dirname "$0")/lib.sh"
fake mpirun 0

# err STATUS NEEDLE [NAME=VALUE...] args...: lockstep-run must fail with STATUS and NEEDLE.
err() {
    local status=$1 needle=$2
    shift 2
    local envs=()
    while [ $# -gt 0 ] && [[ $1 == [A-Z_]*=* ]]; do envs+=("$1"); shift; done
    case_ "$*"
    run "${envs[@]}" "$LSR" "$@"
    expect_rc "$status"
    expect_out ""
    expect_err "lockstep-run: $needle"
    [ "$(printf '%s\n' "$err" | grep -c .)" -le 1 ] || fail "more than one line: $err"
}

# The program.
err 127 "program 'no-such-program-xyz' not found in PATH" -n 2 no-such-program-xyz
err 127 "program './no-such-program' not found" ./no-such-program
err 127 "program '/nonexistent/prog' not found" --dry-run /nonexistent/prog
printf '#!/bin/sh\n' >"$tmp/noexec"
chmod 644 "$tmp/noexec"
err 126 "program '$tmp/noexec' is not an executable file" -n 2 "$tmp/noexec"
err 126 "program '$tmp' is not an executable file" "$tmp"

# -n
err 2 "-n/--np must be a whole number from 1 to 1000000, got '0'" -n 0 true
err 2 "-n/--np must be a whole number from 1 to 1000000, got '0'" --np=0 true
err 2 "-n/--np must be a whole number from 1 to 1000000, got '-1'" -n -1 true
err 2 "-n/--np must be a whole number from 1 to 1000000, got 'abc'" -n abc true
err 2 "-n/--np must be a whole number from 1 to 1000000, got '2x'" -n 2x true
err 2 "-n/--np must be a whole number from 1 to 1000000, got ' 2'" -n ' 2' true
err 2 "-n/--np must be a whole number from 1 to 1000000, got '99999999999'" -n 99999999999 true
err 2 "option '-n' needs a value" -n

# Hostfiles.
HF=$tmp/hf
err 2 "cannot read hostfile '/nonexistent/hostfile': No such file or directory" --hostfile /nonexistent/hostfile true
err 2 "cannot read hostfile '$tmp': Is a directory" --hostfile "$tmp" true
printf 'node1 slots=2\n# ok so far\nnode2 slots=two\n' >"$HF"
err 2 "$HF:3: slots must be a positive integer, got 'two'" --hostfile "$HF" true
printf 'node1 slots=0\n' >"$HF"
err 2 "$HF:1: slots must be a positive integer, got '0'" --hostfile "$HF" true
printf 'node1 slots=\n' >"$HF"
err 2 "$HF:1: slots must be a positive integer, got ''" --hostfile "$HF" true
printf '\nnode1 cores=3\n' >"$HF"
err 2 "$HF:2: unknown attribute 'cores' (expected slots=N, max_slots=N or username=U)" --hostfile "$HF" true
printf 'node1 2\n' >"$HF"
err 2 "$HF:1: expected 'slots=N' after the host name, got '2'" --hostfile "$HF" true
printf 'no$de slots=1\n' >"$HF"
err 2 "$HF:1: 'no\$de' is not a host name" --hostfile "$HF" true
printf 'node1 slots=4 max_slots=2\n' >"$HF"
err 2 "$HF:1: slots=4 exceeds max_slots=2" --hostfile "$HF" true
printf 'node1 slots=2 slots=3\n' >"$HF"
err 2 "$HF:1: the slot count given twice" --hostfile "$HF" true
printf 'node1 max_slots=2 max-slots=3\n' >"$HF"
err 2 "$HF:1: max_slots given twice" --hostfile "$HF" true
# what mpirun refuses after starting ("multiple definitions of the slot count", "illegal
# character in node name"), refused before
printf 'a slots=2\nb\na slots=1\n' >"$HF"
err 2 "$HF:3: 'a' is listed again with slots=1 (first on line 1): Open MPI refuses a second slot count for a host; give its total on one line" --hostfile "$HF" true
printf 'a\na slots=1\n' >"$HF"
err 2 "$HF:2: 'a' is listed again with slots=1 (first on line 1)" --hostfile "$HF" true
# Names of this machine are one node to Open MPI: a slot count for each is refused by mpirun
# ("multiple definitions of the slot count"); a bare repeat adds a slot
ME=$(hostname)
if [ "$ME" != localhost ]; then
    printf 'localhost slots=1\n%s slots=1\n' "$ME" >"$HF"
    err 2 "$HF:2: '$ME' is listed again with slots=1 (first on line 1 as 'localhost', both this machine)" \
        --hostfile "$HF" -n 2 true
fi
printf '127.0.0.1 slots=1\nlocalhost slots=2\n' >"$HF"
err 2 "$HF:2: 'localhost' is listed again with slots=2 (first on line 1 as '127.0.0.1', both this machine)" \
    --hostfile "$HF" -n 2 true
case_ "this machine's names: a bare repeat adds a slot"
printf 'localhost slots=1\n%s\n' "$ME" >"$HF"
run "$LSR" --dry-run --hostfile "$HF" -n 2 true
expect_rc 0
# A line with max_slots= and no slots= has at most that many slots: mpirun refused -n 3 (without
# --oversubscribe, or OMPI_MCA_rmaps_base_oversubscribe), which lockstep-run let through
printf 'localhost max_slots=1\n' >"$HF"
err 2 "-n 3 exceeds the 1 slot given by $HF (max_slots= caps a line without slots=); add slots or pass --oversubscribe" \
    --hostfile "$HF" -n 3 true
case_ "max_slots= with --oversubscribe or OMPI_MCA_rmaps_base_oversubscribe=1: allowed"
run "$LSR" --dry-run --hostfile "$HF" -n 3 --oversubscribe true
expect_rc 0
run OMPI_MCA_rmaps_base_oversubscribe=1 "$LSR" --dry-run --hostfile "$HF" -n 3 true
expect_rc 0
# A host's slots= line and its bare repeats: slots + one each (mpirun refused -n 4 for "localhost
# slots=2" and a bare "localhost": "not enough slots", after lockstep-run had let it through)
printf 'localhost slots=2\nb slots=1\nlocalhost\n' >"$HF"
err 2 "-n 5 exceeds the 4 slots given by $HF; add slots or pass --oversubscribe" --hostfile "$HF" -n 5 true
case_ "slots= and a bare repeat: -n up to their sum, and their sum by default"
run "$LSR" --dry-run --hostfile "$HF" -n 4 true
expect_rc 0
[[ $out == *" -np 4 --hostfile $HF "* ]] || fail "stdout: $out"
run CUDA_VISIBLE_DEVICES=0,1,2 "$LSR" --dry-run --hostfile "$HF" true
expect_rc 0
[[ $out == *" -np 4 --hostfile $HF "* ]] || fail "stdout: $out"
printf 'node1:4\n' >"$HF"
err 2 "$HF:1: 'node1:4': a hostfile gives slots as 'node1 slots=4' (host:N is --hosts' form)" --hostfile "$HF" true
# A NUL byte (a binary file, a corrupted copy): the name was cut at it without a word, and what
# followed on the line (slots=2) was dropped; mpirun stops on it ("parse error ... on token 1"),
# except in a comment
printf 'node1\0junk slots=2\nnode2 slots=1\n' >"$HF"
err 2 "$HF:1: a NUL byte at column 6, which Open MPI's mpirun cannot parse (is it a text file?)" --hostfile "$HF" true
printf '# hosts\n\nnode1 slots=2\0\n' >"$HF"
err 2 "$HF:3: a NUL byte at column 14," --hostfile "$HF" true
printf '\0\n' >"$HF"
err 2 "$HF:1: a NUL byte at column 1," --hostfile "$HF" true
case_ "a NUL byte in a comment: read past, as mpirun does"
printf 'node1 slots=2 # a\0b\nnode2 slots=1\n' >"$HF"
run "$LSR" --dry-run --hostfile "$HF" true
expect_rc 0
[[ $out == *" -np 3 --hostfile $HF "* ]] || fail "stdout: $out"
# A name with ':' is an IPv6 address (mpirun passes any run of letters, digits and ':' on as a
# node name, and ssh then fails on it) or --hosts' host:N
printf 'node::1 slots=1\n' >"$HF"
err 2 "$HF:1: 'node::1' is neither a host name nor an IPv6 address (a name with ':' must be one)" --hostfile "$HF" true
printf 'node1 slots=1\nhost:2:3\n' >"$HF"
err 2 "$HF:2: 'host:2:3' is neither a host name nor an IPv6 address" --hostfile "$HF" true
printf 'me@1:2:3:4:5:6:7:8:9\n' >"$HF"
err 2 "$HF:1: 'me@1:2:3:4:5:6:7:8:9' is neither a host name nor an IPv6 address" --hostfile "$HF" true
printf 'node1:x\n' >"$HF"
err 2 "$HF:1: 'node1:x' is not a host name (a ':' belongs to an IPv6 address, or to --hosts' host:N)" --hostfile "$HF" true
printf ':4\n' >"$HF"
err 2 "$HF:1: ':4' is not a host name" --hostfile "$HF" true
# "::" is every address of no host: mpirun took it for this machine
printf ':: slots=1\n' >"$HF"
err 2 "$HF:1: '::' is the unspecified IPv6 address, not a host's (this machine is 'localhost')" --hostfile "$HF" true
printf '[::1] slots=1\n' >"$HF"
err 2 "$HF:1: '[::1]': an IPv6 address goes in a hostfile without brackets ('::1'), which Open MPI's mpirun cannot parse" \
    --hostfile "$HF" true
printf '[fe80::1%%eth0] slots=1\n' >"$HF"
err 2 "$HF:1: '[fe80::1%eth0]': an IPv6 address with a zone ('%eth0'), which Open MPI's mpirun cannot parse; give the host's name or a global address" \
    --hostfile "$HF" true
printf 'fe80::1%%eth0 slots=1\n' >"$HF"
err 2 "$HF:1: 'fe80::1%eth0': an IPv6 address with a zone ('%eth0')" --hostfile "$HF" true
printf '::ffff:10.0.0.1 slots=1\n' >"$HF"
err 2 "$HF:1: '::ffff:10.0.0.1': an IPv6 address with an IPv4 part, which Open MPI's mpirun cannot parse; write it in hexadecimal ('0:0:0:0:0:ffff:a00:1')" \
    --hostfile "$HF" true
printf 'node1 username=\n' >"$HF"
err 2 "$HF:1: username= has no value" --hostfile "$HF" true
# Windows line endings: mpirun stops at the '\r' ("parse error in the hostfile ... line 1 on
# token 1", exit 1, and --max-restarts started it again), so it is refused here
printf 'localhost slots=2\r\n' >"$HF"
err 2 "$HF:1: the line ends in a carriage return (Windows line endings), which Open MPI's mpirun cannot parse; convert the file with dos2unix or sed -i 's/\r\$//'" \
    --hostfile "$HF" true
printf '# hosts\r\n\r\nlocalhost\r\n' >"$HF" # (mpirun reads the comment and the blank line)
err 2 "$HF:3: the line ends in a carriage return" --hostfile "$HF" true
# A pipe (a process substitution, /dev/stdin from a pipe): mpirun reads its hostfile more than
# once and found it empty after lockstep-run had read it ("No nodes are available", exit 1)
err 2 "hostfile '/dev/fd/3' is a pipe, not a file: mpirun reads its hostfile more than once and would find it empty; write the hosts to a file" \
    --hostfile /dev/fd/3 true 3< <(echo localhost slots=2)
case_ "a hostfile redirected to /dev/stdin from a file: read as the file"
printf 'localhost slots=2\n' >"$HF"
run "$LSR" --dry-run --hostfile /dev/stdin true <"$HF"
expect_rc 0
[[ $out == *" -np 2 --hostfile /dev/stdin "* ]] || fail "stdout: $out"
# A UTF-8 byte-order mark (an editor's "UTF-8 with BOM"): mpirun's parse error on line 1 ("token
# 1"), even before a comment; the message named an invisible host ''
printf '\xef\xbb\xbf# hosts\nlocalhost slots=2\n' >"$HF"
err 2 "$HF:1: the file starts with a UTF-8 byte-order mark, which Open MPI's mpirun cannot parse; remove it with sed -i '1s/^\xEF\xBB\xBF//'" \
    --hostfile "$HF" true
# '_' and ':' (an IPv6 address) in a host name: Open MPI 4's mpirun stops ("the regex parser has
# detected the presence of an illegal character in the following node name") after lockstep-run
# had let them through; its regx component naive takes them
# (the rule is Open MPI 3 and 4's: the fake mpirun says it is 4.1.4; as 5.0.3 or another MPI, the
# names are passed on)
fake_version() {
    printf '#!/bin/sh\n[ "$1" = --version ] && { printf "%s\\n\\nReport bugs to x\\n"; exit 0; }\nexit 0\n' "$1" \
        >"$tmp/bin/mpirun"
}
fake_version "mpirun (Open MPI) 4.1.4"
printf 'node1 slots=1\nnode_2 slots=1\n' >"$HF"
err 2 "$HF:2: 'node_2': Open MPI's mpirun refuses '_' in a host name (\"illegal character\"); give another name of that host (letters, digits, '-' and '.') or its IPv4 address, or pass --mca regx naive" \
    --hostfile "$HF" true
printf 'fd00::2 slots=1\n' >"$HF"
err 2 "$HF:1: 'fd00::2': Open MPI's mpirun refuses ':' in a host name (\"illegal character\": an IPv6 address); give" \
    --hostfile "$HF" true
err 2 "--hosts: 'node_2': Open MPI's mpirun refuses '_' in a host name" --hosts node1:1,node_2:1 true
err 2 "--hosts: 'me@node1': Open MPI's mpirun refuses '@' in a --host name (\"illegal character\"); a user name goes in a hostfile ('user@host' or 'host username=user'), or pass --mca regx naive" \
    --hosts me@node1:2 true
case_ "a user name in a hostfile: passed to mpirun"
printf 'me@node1 slots=2\n' >"$HF"
run "$LSR" --dry-run --hostfile "$HF" true
expect_rc 0
[[ $out == *" -np 2 --hostfile $HF "* ]] || fail "stdout: $out"
case_ "'_' and ':' with regx naive (--mca, OMPI_MCA_regx): passed to mpirun"
printf 'node1 slots=1\nnode_2 slots=1\nfd00::2 slots=1\n' >"$HF"
run "$LSR" --dry-run --mca regx naive --hostfile "$HF" true
expect_rc 0
[[ $out == *" -np 3 --hostfile $HF "* ]] || fail "stdout: $out"
run OMPI_MCA_regx=naive "$LSR" --dry-run --hosts node_2:2 true
expect_rc 0
[[ $out == *" -np 2 --host node_2:2 "* ]] || fail "stdout: $out"
for v in "mpirun (Open MPI) 5.0.3" "HYDRA build details:"; do
    case_ "'_', ':' and '@' where mpirun says '$v': passed to it"
    fake_version "$v"
    run "$LSR" --dry-run --verbose --hostfile "$HF" true
    expect_rc 0
    [[ $out == *" -np 3 --hostfile $HF "* ]] || fail "stdout: $out"
    expect_err "lockstep-run: host 'node_2' has a '_', which Open MPI 3 and 4 refuse; $tmp/bin/mpirun is not one of them: passed on"
    run "$LSR" --dry-run --hosts me@node1:2 true
    expect_rc 0
    [[ $out == *" -np 2 --host me@node1:2 "* ]] || fail "stdout: $out"
done
fake mpirun 0
printf '# nothing\n\n' >"$HF"
err 2 "hostfile '$HF' names no hosts" --hostfile "$HF" true
err 2 "option '--hostfile' needs a value" --hostfile

# --hosts
err 2 "--hosts: slots in 'a:0' must be a positive integer (in 'a:0')" --hosts a:0 true
err 2 "--hosts: slots in 'b:x' must be a positive integer (in 'a:1,b:x')" --hosts a:1,b:x true
err 2 "--hosts: slots in 'a:2:3' must be a positive integer" --hosts a:2:3 true
err 2 "--hosts: slots in 'a:+2' must be a positive integer" --hosts a:+2 true
err 2 "-n/--np must be a whole number from 1 to 1000000, got '+2'" -n +2 true
err 2 "--hosts: '' is not host[:slots] (in 'a,,b')" --hosts a,,b true
err 2 "--hosts: 'a b' is not host[:slots]" --hosts 'a b' true
err 2 "--hosts: ':2' is not host[:slots]" --hosts :2 true
# an IPv6 address: its colons read as host:slots ("'fd00::1' is not host[:slots]")
err 2 "--hosts: 'fd00::1' is an IPv6 address, which mpirun's --host cannot take (its colons read as host:slots); give the host's name or IPv4 address (in 'a,fd00::1')" \
    --hosts a,fd00::1 true
err 2 "--hosts: '[::1]:2' is an IPv6 address" --hosts '[::1]:2' true
err 2 "--hosts: '-a' is not host[:slots]" --hosts=-a true
err 2 "--hosts must not be empty" --hosts '' true
err 2 "--hostfile and --hosts are alternatives; give one" --hostfile "$HF" --hosts a true
# the first file was dropped without a word
err 2 "--hostfile given twice ('$HF' and '$tmp/hf2'): give one file with all the hosts" --hostfile "$HF" --hostfile "$tmp/hf2" true

# mpirun
err 2 "--mpirun /nonexistent/mpirun: no such program" -n 2 --mpirun /nonexistent/mpirun true
err 2 "--mpirun $tmp/noexec: not an executable file" -n 2 --mpirun "$tmp/noexec" true
# an empty value (an unset shell variable): named, not "--mpirun : no such program" or a file ''
err 2 "--mpirun must not be empty" -n 2 --mpirun '' true
err 2 "--hostfile must not be empty" --hostfile '' true
err 2 "-n must not be empty" -n '' true
err 2 "--srun-mpi must not be empty" --srun-mpi= true
err 2 "LOCKSTEP_MPIRUN /nonexistent/mpirun: no such program" LOCKSTEP_MPIRUN=/nonexistent/mpirun -n 2 true
err 2 "-n 2 needs mpirun, which was not found in PATH; install Open MPI (openmpi-bin) or pass --mpirun PATH" \
    PATH="$tmp/empty" -n 2 /bin/true
err 2 "--hosts needs mpirun, which was not found in PATH" PATH="$tmp/empty" --hosts a,b /bin/true
err 2 "--launcher direct runs one process on this host; -n 2 needs mpirun or srun" --launcher direct -n 2 true
err 2 "LOCKSTEP_LAUNCHER direct runs one process on this host" LOCKSTEP_LAUNCHER=direct -n 2 true

# a program that is there but whose #! interpreter is not: not "No such file or directory", and
# found before mpirun starts (it exited 131, "128 + SIGQUIT", and --max-restarts restarted it)
printf '#!/nonexistent/interpreter\n' >"$tmp/badinterp"
printf '#!/etc/passwd -x\n' >"$tmp/noexecinterp"
chmod 755 "$tmp/badinterp" "$tmp/noexecinterp"
for n in 1 2; do
    err 127 "program '$tmp/badinterp' cannot run: its interpreter '/nonexistent/interpreter' (the #! line) was not found" \
        -n $n --max-restarts 2 "$tmp/badinterp"
    err 126 "program '$tmp/noexecinterp' cannot run: its interpreter '/etc/passwd' (the #! line) is not an executable file" \
        -n $n "$tmp/noexecinterp"
done
printf '#!badinterp\n' >"$tmp/relinterp" # (a name without '/': relative to the working directory)
chmod 755 "$tmp/relinterp"
err 127 "program '$tmp/relinterp' cannot run: its interpreter 'badinterp' (the #! line) was not found" \
    -n 1 "$tmp/relinterp"
# a script saved with Windows line endings: the kernel takes the '\r' for part of the
# interpreter's name ('/bin/sh\r': "bad interpreter"); mpirun started and exited 131
printf '#!/bin/sh\r\necho hi\r\n' >"$tmp/crlf"
printf '#!/usr/bin/env sh\r\n' >"$tmp/crlfarg" # the '\r' ends the argument there: env looks for 'sh\r'
chmod 755 "$tmp/crlf" "$tmp/crlfarg"
for n in 1 2; do
    err 127 "program '$tmp/crlf' cannot run: its #! line ends in a carriage return (Windows line endings), which the kernel takes for part of the interpreter's name; convert it with dos2unix or sed -i 's/\r\$//'" \
        -n $n --max-restarts 1 "$tmp/crlf"
    err 127 "program '$tmp/crlfarg' cannot run: its #! line ends in a carriage return" -n $n "$tmp/crlfarg"
done

# A lone ':' among the program's arguments: mpirun would split the job at it (MPMD), start other
# programs with cut arguments and exit 0; it has no escape for it. Direct: passed on verbatim.
err 2 "argument 2 of /bin/echo is a lone ':', which mpirun reads as the separator between programs (MPMD)" \
    -n 2 /bin/echo a : /bin/echo
err 2 "argument 1 of /bin/echo is a lone ':'" --dry-run -n 2 /bin/echo :
case_ "':' as an argument with one rank (direct), and ':x' with mpirun: passed on"
run "$LSR" -n 1 /bin/echo a : b
expect_rc 0
expect_out "a : b"
run "$LSR" --dry-run -n 2 /bin/echo ':x' 'x:'
expect_rc 0
[[ $out == *" /bin/echo :x x:" ]] || fail "stdout: $out"

# Other options.
err 2 "unknown or ambiguous option '--bogus' (see lockstep-run --help)" --bogus true
err 2 "unknown or ambiguous option '--ho'" --ho a true
err 2 "mpirun's -np is -n N or --np N here" -np 2 true
err 2 "unknown option '-q' (see lockstep-run --help)" -q true
err 2 "--mca needs a parameter name and a value: --mca KEY VALUE" --mca btl
err 2 "--mca: '' is not an MCA parameter name" --mca =x true
err 2 "--mca btl: the value is empty" --mca btl '' true
err 2 "--mca btl: the value is empty" --mca btl= true
err 2 "no program given: --mca btl took '/bin/true' as its value (--mca KEY VALUE, or --mca KEY=VALUE)" --mca btl /bin/true
err 2 "--mca: 'a b' is not an MCA parameter name" --mca 'a b' c true
err 2 "--mca: 'x;y' is not an MCA parameter name" --mca 'x;y=1' true
err 2 "--launcher: unknown launcher 'ssh' (expected auto, mpirun, srun or direct)" --launcher ssh true
err 2 "LOCKSTEP_LAUNCHER: unknown launcher 'x'" LOCKSTEP_LAUNCHER=x true
err 2 "--bind must be none, core or socket, got 'hwthread'" --bind hwthread true
err 2 "-x: '1BAD' is not NAME or NAME=VALUE" -x 1BAD true
err 2 "-x: '=v' is not NAME or NAME=VALUE" -x =v true
# the process id a rank that aborts the job signals: -x LOCKSTEP_RUN_PID=1 gave the ranks 1 (init)
# instead of lockstep-run's, -x LOCKSTEP_RUN_PID sent it to the ranks on other hosts, where it names
# another process
err 2 "-x LOCKSTEP_RUN_PID=1: lockstep-run sets LOCKSTEP_RUN_PID itself (its process id, for mpirun's ranks on this host)" \
    -n 2 -x LOCKSTEP_RUN_PID=1 true
err 2 "-x LOCKSTEP_RUN_PID: lockstep-run sets LOCKSTEP_RUN_PID itself" --hosts a,b -x LOCKSTEP_RUN_PID true
case_ "-x LOCKSTEP_RUN_PIDS (another name) is forwarded"
run "$LSR" --dry-run -n 2 -x LOCKSTEP_RUN_PIDS=1 true
expect_rc 0
[[ $out == *" -x LOCKSTEP_RUN_PIDS=1 "* ]] || fail "stdout: $out"
err 2 "no program given" -n 2
err 2 "no program given" -n 2 --

# A directory this user may not search (root searches any: as root, run as nobody): the program in
# it "cannot be run: Permission denied", not "not an executable file" (it is); its interpreter the
# same; a PATH entry of that kind is passed over, as by the shell: a program in none is not found
# (a PATH holding /root/bin, kept by su, made every typo "not an executable file"), and one later
# in PATH is used.
as=()
[ "$(id -u)" != 0 ] || as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ ${#as[@]} -eq 0 ] || { command -v setpriv >/dev/null && "${as[@]}" test -x "$LSR"; }; then
    mkdir "$tmp/shut"
    cp /bin/true "$tmp/shut/prog"
    printf '#!%s\n' "$tmp/shut/prog" >"$tmp/shutinterp"
    chmod 755 "$tmp/shutinterp"
    chmod 0 "$tmp/shut"
    nosearch="Permission denied (a directory on its path may not be searched by this user)"
    unshut() { chmod 755 "$tmp/shut"; }
    case_ "a program in a directory this user may not search"
    run "${as[@]}" "$LSR" -n 2 "$tmp/shut/prog"
    expect_rc 126
    expect_out ""
    [ "$err" = "lockstep-run: program '$tmp/shut/prog' cannot be run: $nosearch" ] || fail "stderr: $err"
    case_ "an interpreter in a directory this user may not search"
    run "${as[@]}" "$LSR" -n 1 "$tmp/shutinterp"
    expect_rc 126
    [ "$err" = "lockstep-run: program '$tmp/shutinterp' cannot run: its interpreter '$tmp/shut/prog' (the #! line) cannot be run: $nosearch" ] ||
        fail "stderr: $err"
    case_ "--mpirun in a directory this user may not search"
    run "${as[@]}" "$LSR" --mpirun "$tmp/shut/mpirun" -n 2 true
    expect_rc 2
    [ "$err" = "lockstep-run: --mpirun $tmp/shut/mpirun: cannot be run: $nosearch" ] || fail "stderr: $err"
    case_ "PATH's first entry a directory this user may not search"
    run PATH="$tmp/shut:$BASEPATH" "${as[@]}" "$LSR" -n 2 no-such-program-xyz
    expect_rc 127
    [ "$err" = "lockstep-run: program 'no-such-program-xyz' not found in PATH (give a path such as ./prog)" ] ||
        fail "stderr: $err"
    run PATH="$tmp/shut:$BASEPATH" "${as[@]}" "$LSR" --dry-run -n 1 true
    expect_rc 0
    expect_out "true"
    unshut
else
    echo "note: cannot run lockstep-run as nobody here; a directory it may not search is left out" >&2
fi

finish
