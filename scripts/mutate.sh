#!/usr/bin/env bash
# Mutation testing: break the code on purpose, one known-dangerous edit at a
# time, and prove that the tests `make test` runs catch each (see
# docs/TESTING.md, "Mutation testing").
#
# For each row of MUTATIONS below, in a throwaway copy of the working tree
# (tracked and untracked files, uncommitted changes included): apply the
# substitution to the file, check that it matched exactly once, run the
# row's tests under the race detector, and require that they FAIL. Prints
# one markdown table row per mutation and exits non-zero if any mutation
# survived, did not apply, did not build, or named no test.
#
#   scripts/mutate.sh                 every mutation
#   scripts/mutate.sh NAME...         only these
#   scripts/mutate.sh -l              list the mutations
#   scripts/mutate.sh -n [NAME...]    apply each and show its diff; run nothing
#
# Environment: GO (go), MUTATE_TIMEOUT (go test -timeout per run, 3m),
# MUTATE_COUNT (runs per mutation, each a go test process of its own, 1: a
# mutation is caught only if every run fails, and the baseline passes only
# if every run passes), MUTATE_BASELINE (1: first run every row's tests on
# the unmutated copy, which must pass; 0: skip), MUTATE_LOGS (where each
# run's output is kept; a new temp dir by default).
set -euo pipefail

# One mutation per line:  name | file | substitution | package | test regex
#   substitution  a Perl s{pattern}{replacement} applied to the whole file;
#                 leave out the g flag (the script adds it to count the
#                 matches: exactly one is required)
#   package       the Go package whose tests must catch it
#   test regex    go test -run's argument; the tests must be ones `make
#                 test` runs
# Fields are separated by " | " (spaces around the bar), so a field may hold
# a bar without spaces (regex alternation). Keep each row's tests to
# seconds: the whole script should stay under ~10 minutes.
MUTATIONS=$(cat <<'EOF'
linearize-no-read-entry | node/read.go | s{go func\(\) \{ committed <- n\.raft\.Apply\(fsm\.EncodeBatch\(nil\), 0\)\.Error\(\) \}\(\)}{committed <- nil} | ./test/ | ^TestDeposedLeaderServesNoStaleRead$|^TestLinearizableReadWaitsForApply$
read-entry-as-barrier | node/read.go | s{n\.raft\.Apply\(fsm\.EncodeBatch\(nil\), 0\)}{n.raft.Barrier(0)} | ./test/ | ^TestIdleAfterReadsConverges$
raft-peer-gate-open | node/node.go | s{\treturn member \|\| empty\n}{\treturn member || empty || id != ""\n} | ./test/ | ^TestRaftPortNeedsMembership$
rpc-member-gate-open | node/forward.go | s{if !s\.secure \{}{if true \{} | ./test/ | ^TestForwardingNeedsMembership$
guard-role-ignored | api/auth.go | s{if has < need \{}{if false \{} | ./api/ | ^TestGuardRoutes$
tls-client-cert-optional | certs/config.go | s{cfg\.ClientAuth = tls\.RequireAndVerifyClientCert}{cfg.ClientAuth = tls.VerifyClientCertIfGiven} | ./transport/ | ^TestTLSNeedsClientCertificate$
linearize-served-locally | node/read.go | s{if Consistency\(args\.Consistency\) == Stale \{}{if true \{} | ./test/ | ^TestDeposedLeaderServesNoStaleRead$
submit-new-id-per-attempt | node/apply.go | s{(\t\treq\.Seed = rand\.Uint64\(\))}{\t\treq.ID = uuid.NewString()\n$1} | ./test/ | ^TestRetryAfterLostAnswerAppliesOnce$
submit-new-id-after-unknown | node/apply.go | s{(\tapplied := func\(o outcome\) \(\*fsm\.Result, bool, error\) \{ )}{$1if o.err != nil \&\& !o.definite \{\n\t\treq.ID = uuid.NewString()\n\t\}\n\t\t} | ./test/ | ^TestRetryAfterLostAnswerAppliesOnce$
restore-forgets-request-id | node/write.go | s{b\.Remember\(id, fp\)\.Write\(}{b.Write(} | ./node/ | ^TestRestoreRequestID$
restore-no-request-lookup | node/write.go | s{if prev, ok := r\.fsm\.RequestFingerprint\(id\); ok \{}{if prev, ok := r.fsm.RequestFingerprint(id); false \&\& ok \{} | ./test/ | ^TestRestoreRetriedAfterLostAnswer$
restore-disk-before-lookup | node/write.go | s{(\tterm := r\.raft\.CurrentTerm\(\)\n)}{$1\tif e := r.disk.lowError(); e != nil \{\n\t\treturn false, e\n\t\}\n} | ./test/ | ^TestRestoreRetriedAfterLostAnswer$
request-classes-ignored | fsm/requests.go | s{if t\.classes && IsDrawnRequestID\(id\) \{}{if false \{} | ./fsm/ | ^TestKeyedRequestsOutliveDrawnOnes$
request-table-no-lookup | fsm/state.go | s{if prev := s\.requests\.get\(r\.ID\); prev != nil \{}{if prev := s.requests.get(r.ID); false && prev != nil \{} | ./fsm/ | ^TestIdempotentRequests$
founding-ignores-peer-state | node/membership.go | s{f\.life\.get\(\) < phaseOffering:\n\t\t\t\treturn "", f\.refuseFounding\(r\.peer, r\.reply\)}{f.life.get() < phaseOffering:\n\t\t\t\tempty[r.peer.ID], ready[r.peer.ID] = true, true} | ./test/ | ^TestWipedVoterRefused$|^TestDiskLostRightAfterFirstEntries$
founding-offer-torn | node/membership.go | s{\tready := f\.life\.get\(\) >= phaseOffering\n(\tcandidate, _ := f\.candidate\.Load\(\)\.\(string\)\n)}{$1\tready := f.life.get() >= phaseOffering\n} | ./node/ | ^TestFoundingOfferWhole$
founding-counts-offer-without-candidate | node/membership.go | s{case r\.reply\.Ready && r\.reply\.Candidate != "":}{case r.reply.Ready:} | ./node/ | ^TestFoundingWaitsForTheCandidate$
founding-marker-skips-the-wait | node/membership.go | s{(\t\t\tf\.offerCandidate\(c\)\n)(\t\t\})}{$1\t\t\treturn c, nil\n$2} | ./test/ | ^TestFoundingResumesAfterCrash$
lone-node-opens-without-cluster-id | node/membership.go | s{if err := f\.keepClusterID\(uuid\.NewString\(\)\); err != nil \{}{if err := error(nil); err != nil \{} | ./test/ | ^TestLoneRestartNotCaptured$
lone-node-keeps-old-cluster-id | node/membership.go | s{\tdefault:\n(\t\t// A lone node without state)}{\tcase f.clusterID() == "":\n$1} | ./test/ | ^TestLoneRestartNotCaptured$
network-pool-deletable | fsm/state.go | s{what != "" && s\.rules\.networkPoolsKept}{what != "" && false} | ./fsm/ | ^TestNetworkPoolKept$
snapshot-needs-network-pools | fsm/snapshot.go | s{if err := checkNetworkShape\(n\); err != nil \{}{if err := s.checkNetwork(n); err != nil \{} | ./node/ | ^TestRestartAfterNetworkPoolDeleted$
nonvoter-below-level-2 | fsm/state.go | s{if r\.Kind == KindSetMemberNonvoter && !s\.rules\.nonvoterMembers}{if false && !s.rules.nonvoterMembers} | ./fsm/ | ^TestNonvoterNeedsLevel2$
repair-compares-strings | fsm/reconcile.go | s{if s\.rules\.repairByOffset && holds}{if false && holds} | ./fsm/ | ^TestRepairKeepsAValueSpelledAnotherWay$
delete-service-needs-network | fsm/services.go | s{if !s\.rules\.releaseWithoutNetwork \{}{if true \{} | ./fsm/ | ^TestDeleteServiceWithoutANetworkPool$
healthcheck-invalid-argument | fsm/services.go | s{\t\t\tcode = CodeInvalid\n}{\t\t\tcode = CodeInvalidArgument\n} | ./fsm/ | ^TestHealthCheckNodePortOutOfRangeIsInvalid$
backups-before-log-applied | node/backup.go | s{if applied := appliedIndex\(\); applied < floor \{}{if applied := appliedIndex(); false && applied < floor \{} | ./test/ | ^TestScheduledBackupsWaitAfterRestart$
restore-reads-after-barrier | node/write.go | s{term := r\.raft\.CurrentTerm\(\)\n\tif err := r\.wait\(r\.raft\.Apply\(fsm\.EncodeBatch\(nil\), 0\)\)}{term := r.raft.CurrentTerm()\n\tif err := r.wait(r.raft.Barrier(0))} | ./test/ | ^TestReadyAfterRepeatedRestore$
founding-marker-outlives-join | node/membership.go | s{\t\treturn durable\.Remove\(filepath\.Join\(f\.cfg\.DataDir, foundingFile\)\)\n}{\t\treturn nil\n} | ./test/ | ^TestWholeClusterLost$
founding-marker-kept | node/node.go | s{if err := durable\.Remove\(filepath\.Join\(n\.cfg\.DataDir, foundingFile\)\); err != nil \{}{if err := error(nil); err != nil \{} | ./test/ | ^TestLeftoverFoundingMarkerRemoved$
join-skips-member-check | node/membership.go | s{\tif err := fsm\.ValidateMember\(m\); err != nil \{\n\t\treturn err\n\t\}\n(\tif m\.RaftAddr == "")}{$1} | ./node/ | ^TestJoinRefusesABadMember$
forward-sends-abandoned | node/internal/forward/batch.go | s{\t\t\tlive = append\(live, it\)\n\t\t\treqs = append\(reqs, it\.req\)\n\t\t\}\n}{\t\t\tlive = append(live, it)\n\t\t\}\n\t\treqs = append(reqs, it.req)\n} | ./node/internal/forward/ | ^TestAbandonedBeforeSendIsNotSent$
large-result-applied | fsm/state.go | s{len\(enc\) > MaxRememberedResult && r\.Kind == KindTxn}{false && r.Kind == KindTxn} | ./fsm/ | ^TestLargeResultRefused$
large-result-proposed | node/write.go | s{if size > limit \{}{if false \{} | ./node/ | ^TestLargeAnswerKeepsSnapshots$
request-bytes-shared | fsm/requests.go | s{if t\.byClass \{\n\t\tfor c, limit}{if false \{\n\t\tfor c, limit} | ./fsm/ | ^TestKeyedResultsOutliveLargeDrawnOnes$
cross-site-write-served | api/auth.go | s{\t\tif why == "" \{\n\t\t\twhy = crossSiteWrite\(r\)\n\t\t\}\n}{} | ./api/ | ^TestGuardCrossSiteWrite$
non-member-unbudgeted | node/forward.go | s{if !isMember\(\) \{\n}{if false \{\n} | ./test/ | ^TestNonMemberCannotAmplify$
handshakes-unbounded | transport/mux.go | s{case len\(m\.naming\) >= MaxPendingConns:}{case false:} | ./transport/ | ^TestHandshakeFloodBounded$
fsm-takes-stale-snapshot | fsm/fsm.go | s{!ss\.FromBackup && s\.index < applied}{false && !ss.FromBackup && s.index < applied} | ./fsm/ | ^TestRestoreRefusesStaleSnapshot$
join-accepts-lost-voter | node/members.go | s{case cur != nil && cur\.Suffrage == raft\.Voter && !r\.HasState:}{case false:} | ./test/ | ^TestDiskLostRightAfterFirstEntries$
join-accepts-foreign-state | node/members.go | s{if r\.HasState && !member \{}{if false && !member \{} | ./test/ | ^TestMistakenJoin$
storage-empty-db-accepted | node/internal/storage/storage.go | s{if st\.Marked \{(\n\t\t\treturn st, &Error\{Path: dbPath, Problem: missing)}{if false \{$1} | ./node/ | ^TestStorageDamageRefused$
storage-old-term-accepted | node/internal/storage/storage.go | s{case snap != nil && term < snap\.Term:}{case false:} | ./node/ | ^TestStorageDamageRefused$
storage-walk-ignores-key-order | node/internal/storage/boltcheck.go | s{(\t\tswitch \{\n\t\tcase prev != nil.*?\n\t\t\})}{\t\tif false \{\n$1\n\t\t\}}s | ./node/internal/storage/ | ^TestBoltKeyFlipped$
storage-no-page-walk | node/internal/storage/storage.go | s{err = checkBoltPages\(f, fi\.Size\(\)\)}{_, err = fi, nil} | ./node/ | ^TestStorageDamageRefused$
storage-no-snapshot-crc | node/internal/storage/storage.go | s{string\(got\) != string\(newest\.CRC\)}{false} | ./node/ | ^TestStorageDamageRefused$
wal-not-monotonic | node/internal/storage/storage.go | s{return ok && s\.IsMonotonic\(\)}{return ok && s.IsMonotonic() && false} | ./test/ | ^TestSnapshotCatchUp$
wal-segment-size-unchecked | node/internal/storage/walstore.go | s{case fi\.Size\(\) < int64\(si\.SizeLimit\):}{case false:} | ./node/ | ^TestStorageDamageRefusedWAL$
handshake-ignores-cluster | transport/handshake.go | s{case local != "" && remote != "" && local != remote:}{case false:} | ./transport/ | ^TestHandshakeClusterID$
pool-overlap-unchecked | fsm/state.go | s{exclusive && allocator\.Overlaps\(r, o\) \{}{false && exclusive && allocator.Overlaps(r, o) \{} | ./fsm/ | ^TestPoolOverlap$
ready-ignores-leader-commit | node/ready.go | s{case applied < commit:}{case false:} | ./test/ | ^TestReadiness$
last-voter-removable | node/members.go | s{case voter && voters == 1:}{case voter && voters == 0:} | ./test/ | ^TestOperationsThatCannotSucceed$
singular-ip-folded-as-create | service/plan.go | s{&& old\.ClusterIPs\[0\] == ip \{}{&& old.ClusterIPs[0] == ip && false \{} | ./service/ | ^TestSingularClusterIP$
singular-ip-folded-by-proposer | node/services.go | s{if spec\.ClusterIP == "" \|\| len}{if true || len} | ./test/ | ^TestServiceSingularClusterIP$
v2-fingerprint-own | fsm/command.go | s{\tif r\.Kind == KindPutServiceV2 && r\.Service != nil && len}{\tif false && len} | ./fsm/ | ^TestPutServiceV2RetryAcrossRaise$
restore-replaces-members | node/write.go | s{if err := b\.Remember\(id, fp\)\.Write\(f, r\.fsm\.Members\(\), r\.fsm\.ClusterID\(\), r\.fsm\.FeatureLevel\(\)\); err != nil \{}{if err := b.Remember(id, fp).Write(f, nil, "", r.fsm.FeatureLevel()); err != nil \{} | ./test/ | ^TestRestoreKeepsMembers$
lone-node-founds-beside-backups | node/foundfrom.go | s{newest, count, err := cfg\.backupsSayLost\(\)\n\tif err != nil \|\| count == 0 \{\n\t\treturn nil, err}{newest, count, err := cfg.backupsSayLost()\n\tif true \{\n\t\treturn nil, err} | ./node/ | ^TestLoneNodeLostDiskRefusesToFoundEmpty$
founding-takes-foreign-cluster | node/membership.go | s{case r\.reply\.HasState && !slices\.Contains\(r\.reply\.Voters, f\.id\):}{case r.reply.HasState && !slices.Contains(r.reply.Voters, f.id) && false:} | ./test/ | ^TestWholeClusterLost$
whole-cluster-founds-beside-backups | node/membership.go | s{\t\t\tif err := f\.refuseLostCluster\(\); err != nil \{\n\t\t\t\treturn "", err\n\t\t\t\}\n}{} | ./test/ | ^TestWholeClusterLost$
founding-restore-forgotten | node/foundfrom.go | s{\tif f\.cfg\.RestoreFrom == "" \{\n\t\treturn nil, fmt\.Errorf\("refusing}{\tif f.cfg.RestoreFrom == "" \{\n\t\treturn nil, nil\n\t\treturn nil, fmt.Errorf("refusing} | ./node/ | ^TestLoneNodeFoundingInterrupted$
restore-from-with-state | node/foundfrom.go | s{\t\tif f\.cfg\.RestoreFrom != "" \|\| f\.cfg\.FoundEmpty \{\n\t\t\tf\.logger\.Warn}{\t\tif f.cfg.RestoreFrom != "" \{\n\t\t\treturn readBackupFile(f.cfg.RestoreFrom)\n\t\t\tf.logger.Warn} | ./node/ | ^TestLoneNodeFoundsFromBackup$
founding-restore-fresh-id | node/foundfrom.go | s{id := fmt\.Sprintf\("rangealloc:found-from-%016x", b\.Fingerprint\(\)\)}{id := drawRequestID()} | ./node/ | ^TestLoneNodeFoundsFromBackup$
wire-count-overflows | api/internal/wire/decode.go | s{ok && n <= math\.MaxInt \{}{ok \&\& n <= math.MaxUint64 \{} | ./api/internal/wire/ | ^TestDecodeLeavesTheRestToEncodingJSON$
strict-body-trailing-bracket | api/server.go | s{if len\(bytes\.TrimLeft\(body\[dec\.InputOffset\(\):\], " \\t\\r\\n"\)\) > 0 \{}{if dec.More() \{} | ./api/ | ^TestDecodeStrictRefusesTrailingData$
member-removal-key-unremembered | node/members.go | s{if !retry && \(inTable \|\| requestID != ""\) \{}{if !retry \&\& inTable \{} | ./node/ | ^TestRemoveMemberRetried$
disk-stall-never-held | node/stall.go | s{\t\t\tg\.holdRaft\(true\)\n}{} | ./test/ | ^TestDiskStallLeaderGivesWay$
ready-before-pools | node/leader.go | s{ && l\.settled\.Load\(\) == l\.gen\.Load\(\)}{} | ./test/ | ^TestReadyNotBeforePools$
snapshot-dir-not-synced | node/internal/storage/snapstore.go | s{if err := durable\.SyncDir\(tmp\); err != nil \{}{if err := error(nil); err != nil \{} | ./test/ | ^TestE2EPowerCut$
data-dir-parent-not-synced | internal/durable/durable.go | s{\treturn SyncDir\(parent\)\n}{\treturn nil\n} | ./test/ | ^TestE2EPowerCut$
snapshot-save-not-synced | cmd/rangealloc/commands.go | s{durable\.WriteFile\(args\[0\], data, 0o600\)}{func() error { _ = durable.SyncDir; return os.WriteFile(args[0], data, 0o600) }()} | ./test/ | ^TestE2EPowerCut$
founding-unfinished-ignored | node/membership.go | s{\tf\.bootstrapped = true\n\tf\.unfinished\.Store\(true\)\n\tf\.logger\.Info}{\tf.logger.Info} | ./node/ | ^TestFoundingResumes$
state-marker-never-pending | node/internal/storage/storage.go | s{durable\.WriteFile\(m\.path, \[\]byte\(PendingMarkerText\), 0o600\)}{durable.WriteFile(m.path, []byte(MarkerText), 0o600)} | ./node/ | ^TestStorageMarkerPending$
removal-unknown-outcome-dropped | node/members.go | s{return struct\{\}\{\}, id != "" && maybe, err}{return struct{}{}, id != "" \&\& maybe \&\& false, err} | ./test/ | ^TestRemoveMemberAnswerLost$
EOF
)

GO=${GO:-go}
TIMEOUT=${MUTATE_TIMEOUT:-3m}
BASELINE=${MUTATE_BASELINE:-1}
COUNT=${MUTATE_COUNT:-1}

# rows prints the selected rows, one per line, fields separated by tabs.
rows() {
	local line
	while IFS= read -r line; do
		[[ -z $line || $line == \#* ]] && continue
		local -a f=()
		local rest=$line
		while [[ $rest == *" | "* ]]; do
			f+=("${rest%% | *}")
			rest=${rest#* | }
		done
		f+=("$rest")
		if ((${#f[@]} != 5)); then
			echo "mutate.sh: malformed row (want 5 fields): $line" >&2
			exit 2
		fi
		if (($# > 0)); then
			local want=0 n
			for n in "$@"; do [[ $n == "${f[0]}" ]] && want=1; done
			((want)) || continue
		fi
		printf '%s\t%s\t%s\t%s\t%s\n' "${f[@]}"
	done <<<"$MUTATIONS"
}

if [[ ${1:-} == -l ]]; then
	rows | cut -f1,2,4,5 | tr '\t' ' '
	exit 0
fi
dry=0
if [[ ${1:-} == -n ]]; then
	dry=1
	shift
fi

root=$(git rev-parse --show-toplevel)
selected=$(rows "$@") || exit 2
if [[ -z $selected ]]; then
	echo "mutate.sh: no mutation named $*; try -l" >&2
	exit 2
fi

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/rangealloc-mutate.XXXXXX")
logs=${MUTATE_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/rangealloc-mutate-logs.XXXXXX")}
mkdir -p "$logs"
trap 'rm -rf "$work"' EXIT

# The copy: every tracked or untracked, not ignored, file that exists.
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
	tar --null -T - -cf -) | tar -xf - -C "$work"
tree=$work

# runtests PKG REGEX LOG: go test in the copy; prints "pass", "fail",
# "broken" (did not build) or "none" (no test ran).
runtests() {
	local rc=0
	(cd "$tree" && "$GO" test -race -count=1 -timeout "$TIMEOUT" -v -run "$2" "$1") >"$3" 2>&1 || rc=$?
	if grep -qE '\[(build|setup) failed\]' "$3"; then
		echo broken
	elif ! grep -qE '^=== RUN' "$3"; then
		echo none
	elif ((rc == 0)); then
		echo pass
	else
		echo fail
	fi
}

# runmany PKG REGEX LOG: runtests COUNT times (logs LOG.1, LOG.2, …);
# prints "pass" or "fail" when every run did so, else "broken", "none", or
# "mixed P" (P runs passed).
runmany() {
	local i v passed=0 failed=0 other=""
	for ((i = 1; i <= COUNT; i++)); do
		v=$(runtests "$1" "$2" "$3.$i")
		case $v in
		pass) passed=$((passed + 1)) ;;
		fail) failed=$((failed + 1)) ;;
		*) other=$v ;;
		esac
	done
	if [[ -n $other ]]; then
		echo "$other"
	elif ((passed == COUNT)); then
		echo pass
	elif ((failed == COUNT)); then
		echo fail
	else
		echo "mixed $passed"
	fi
}

slug() { printf '%s' "$1" | tr -c 'A-Za-z0-9_.-' '_'; }

# mutate FILE SUBST: applies the substitution in place and prints how many
# times it matched ("error" if it is not valid Perl).
mutate() {
	MUT_SUBST="$2" MUT_COUNT="$work/.count" perl -0777 -i -pe '
		BEGIN { $n = 0 }
		my $c = eval q{$_ =~ } . $ENV{MUT_SUBST} . q{g};
		die "substitution: $@" if $@;
		$n += $c || 0;
		END { open my $fh, ">", $ENV{MUT_COUNT} or die $!; print $fh $n }
	' "$1" && cat "$work/.count" || echo error
}

if ((dry)); then
	status=0
	while IFS=$'\t' read -r name file subst pkg regex; do
		cp "$tree/$file" "$work/.orig"
		count=$(mutate "$tree/$file" "$subst")
		echo "== $name: $file, matched $count time(s)"
		diff -u --label "a/$file" --label "b/$file" "$work/.orig" "$tree/$file" || true
		cp "$work/.orig" "$tree/$file"
		[[ $count == 1 ]] || status=1
	done <<<"$selected"
	exit "$status"
fi

status=0
if [[ $BASELINE == 1 ]]; then
	echo "baseline: the named tests must pass on the unmutated tree ($tree)"
	declare -A seen=()
	while IFS=$'\t' read -r name file subst pkg regex; do
		key="$pkg $regex"
		[[ -n ${seen[$key]:-} ]] && continue
		seen[$key]=1
		t0=$SECONDS
		log="$logs/baseline-$(slug "$pkg-$regex").log"
		v=$(runmany "$pkg" "$regex" "$log")
		printf '  %-8s %s -run %s (%d runs, %ds)\n' "$v" "$pkg" "$regex" "$COUNT" $((SECONDS - t0))
		if [[ $v != pass ]]; then
			echo "mutate.sh: $pkg -run '$regex' does not pass without a mutation ($log): it proves nothing" >&2
			status=1
		fi
	done <<<"$selected"
	if ((status != 0)); then
		exit "$status"
	fi
fi

echo
echo "| mutation | file | tests | verdict | seconds |"
echo "|---|---|---|---|---|"
while IFS=$'\t' read -r name file subst pkg regex; do
	t0=$SECONDS
	log="$logs/$name.log"
	target="$tree/$file"
	verdict=""
	if [[ ! -f $target ]]; then
		verdict="NOT APPLIED (no such file)"
	else
		cp "$target" "$work/.orig"
		count=$(mutate "$target" "$subst")
		if [[ $count != 1 ]]; then
			verdict="NOT APPLIED (matched ${count} times)"
		else
			v=$(runmany "$pkg" "$regex" "$log")
			case $v in
			fail) verdict=caught ;;
			pass) verdict=SURVIVED ;;
			broken) verdict="BROKEN (does not build)" ;;
			none) verdict="NO TESTS (the regex ran none)" ;;
			mixed*) verdict="SURVIVED ${v#mixed } of $COUNT runs" ;;
			esac
			((COUNT == 1)) || [[ $verdict != caught ]] || verdict="caught ($COUNT of $COUNT runs)"
		fi
		cp "$work/.orig" "$target"
	fi
	[[ $verdict == caught* ]] || status=1
	printf '| %s | `%s` | `%s` %s | %s | %d |\n' "$name" "$file" "$regex" "$pkg" "$verdict" $((SECONDS - t0))
done <<<"$selected"

echo
echo "total: $((SECONDS - start)) s; logs in $logs"
if ((status != 0)); then
	echo "mutate.sh: some mutation was not caught (see the table)" >&2
fi
exit "$status"
