# bash completion for nextfs(1) and nextfs-fuse(1)         -*- shell-script -*-
#
# Installed as bash-completion/completions/nextfs, with nextfs-fuse a
# symlink to it; bash-completion loads it the first time either command
# is completed.  It also works sourced on its own, without bash-completion.
#
# The subcommands of nextfs and their options are read from "nextfs
# --help" and "nextfs CMD --help" (the bracketed options of the usage
# lines), so what is added there completes without a change here.  What
# each positional argument is - an image, a mount point, a snapshot name -
# is written down in _nextfs_arg_kinds.  Snapshot names come from
# "nextfs snapshot list --names0 TARGET", which prints every name exactly
# (any byte but '/' and NUL), NUL-terminated.

# The snapshot names of TARGET (an image or a mount point), one per element
# of the array _nextfs_names.
_nextfs_snapshot_names()
{
	local target=$1
	_nextfs_names=()
	[[ $target == "~"* ]] && target=$HOME${target:1}
	[[ -e $target ]] || return 0
	mapfile -t -d '' _nextfs_names < <("${_nextfs_cmd:-nextfs}" snapshot \
		list --names0 "$target" 2>/dev/null)
}

# Dequote what was typed for the common cases (backslashes, a leading
# single or double quote): enough to compare it with raw names.
_nextfs_dequote()
{
	local s=$1
	case $s in
	\'*) s=${s#\'}; s=${s%\'} ;;
	\"*) s=${s#\"}; s=${s%\"} ;;
	*) s=$(printf '%s' "$s" | sed 's/\\\(.\)/\1/g') ;;
	esac
	printf '%s' "$s"
}

# COMPREPLY = the snapshot names of TARGET that start with CUR, quoted so
# that the shell reads them back as they are.
_nextfs_complete_names()
{
	local target=$1 cur n
	cur=$(_nextfs_dequote "$2")
	_nextfs_snapshot_names "$target"
	for n in "${_nextfs_names[@]}"; do
		[[ $n == "$cur"* ]] && COMPREPLY+=("$(printf '%q' "$n")")
	done
}

# COMPREPLY = files (or only directories with -d) matching CUR.
_nextfs_complete_files()
{
	if declare -F _filedir >/dev/null; then
		_filedir $1
		return
	fi
	local cur=$2 f
	compopt -o filenames 2>/dev/null
	if [[ $1 == -d ]]; then
		while IFS= read -r f; do COMPREPLY+=("$f"); done \
			< <(compgen -d -- "$cur")
	else
		while IFS= read -r f; do COMPREPLY+=("$f"); done \
			< <(compgen -f -- "$cur")
	fi
}

# The subcommands listed under "Commands:" in "nextfs --help".
_nextfs_commands()
{
	"${_nextfs_cmd:-nextfs}" --help 2>/dev/null |
		sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z0-9-]*\).*/\1/p'
}

# The options of "nextfs CMD [SUB]": the bracketed ones of its usage
# lines ("[-r|--repair]" gives -r and --repair, "[--to DEST]" --to) and
# the required ones with a value ("--keep SPEC"), plus --help.
_nextfs_options()
{
	local cmd=$1 sub=$2
	"${_nextfs_cmd:-nextfs}" "$cmd" --help 2>/dev/null |
		sed -n '/^usage:/,/^$/p' |
		{ if [[ $sub ]]; then grep -E " $cmd $sub( |$)"; else cat; fi; } |
		grep -oE '\[-[^]]*\]| --[a-z][a-z0-9-]* [A-Z]' |
		sed 's/^ //; s/ [A-Z]$//' | tr -d '[]' | tr '| ' '\n\n' |
		grep -E '^--?[A-Za-z][A-Za-z0-9-]*$'
	echo --help
}

# What the positional arguments of "CMD [SUB]" are, in order: target (an
# image, a device or a mount point), image, dir, snap (an existing
# snapshot name), new (a name to make up: nothing to offer), out (a file or
# "-"), cmd (a command) and rest (files, for every further argument).
# Unknown commands complete files.
_nextfs_arg_kinds()
{
	case "$1" in
	"snapshot take")	echo target new ;;
	"snapshot delete")	echo target snap ;;
	"snapshot list")	echo target ;;
	"snapshot prune")	echo target ;;
	"snapshot run")		echo target cmd rest ;;
	versions)		echo target ;;
	check|info)		echo image ;;
	export)			echo image snap out ;;
	diff)			echo target snap snap ;;
	send)			echo target snap ;;
	restore)		echo image snap ;;
	version)		echo ;;
	umount)			echo dir ;;
	*)			echo target target target ;;
	esac
}

_nextfs()
{
	local cur=${COMP_WORDS[COMP_CWORD]} cmd sub w i ddash=0 kinds kind
	local before after
	local -a args=()
	local _nextfs_cmd=${COMP_WORDS[0]}
	COMPREPLY=()

	[[ $_nextfs_cmd == "~"* ]] && _nextfs_cmd=$HOME${_nextfs_cmd:1}
	if ((COMP_CWORD == 1)); then
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W '--help --version' -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$(_nextfs_commands)" -- "$cur"))
		fi
		return
	fi
	cmd=${COMP_WORDS[1]}
	for ((i = 2; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ $w == = ]]; then
			# "a=b" is three words in COMP_WORDS: one argument
			before=${COMP_WORDS[i - 1]} after=
			if ((i + 1 < COMP_CWORD)); then
				((i++))
				after=${COMP_WORDS[i]}
			fi
			if [[ $before != -* ]] && ((${#args[@]})); then
				args[-1]+="=$after"
			fi
		elif ((!ddash)) && [[ $w == -- ]]; then
			ddash=1
		elif ((!ddash)) && [[ $w == --keep ]]; then
			((i++))		# its SPEC is no positional argument
		elif ((!ddash)) && [[ $cmd == versions ]] &&
			[[ $w == --restore || $w == --to ]]; then
			((i++))		# its value
		elif ((!ddash)) && [[ $cmd == send ]] &&
			[[ $w == -p || $w == -o || $w == --resume ]]; then
			((i++))		# its value
		elif ((ddash)) || [[ $w != -?* ]]; then
			args+=("$w")
		fi
	done
	if [[ $cmd == snapshot ]]; then
		if ((${#args[@]} == 0)); then
			[[ $cur == -* ]] ||
				COMPREPLY=($(compgen -W 'take delete list prune run' \
					-- "$cur"))
			[[ $cur == -* ]] &&
				COMPREPLY=($(compgen -W '--help' -- "$cur"))
			return
		fi
		sub=${args[0]}
		args=("${args[@]:1}")
	fi
	if ((!ddash)) && [[ ${COMP_WORDS[COMP_CWORD - 1]} == --keep ]]; then
		# retention rules (nextfs(1), snapshot prune)
		COMPREPLY=($(compgen -W 'last= hourly= daily= weekly= monthly=
			yearly=' -- "$cur"))
		compopt -o nospace 2>/dev/null
		return
	fi
	# versions PATH --restore NAME --to DEST: the snapshots of PATH's mount
	if [[ $cmd == versions ]] && ((!ddash)); then
		case ${COMP_WORDS[COMP_CWORD - 1]} in
		--restore)
			local where=${args[0]:-.}
			[[ -d $where ]] || where=$(dirname -- "$where")
			_nextfs_complete_names "$where" "$cur"
			return ;;
		--to)
			_nextfs_complete_files "" "$cur"
			return ;;
		esac
	fi
	# send -p PARENT (a snapshot of the source, once it is named), -o FILE
	if [[ $cmd == send ]] && ((!ddash)); then
		case ${COMP_WORDS[COMP_CWORD - 1]} in
		-p)
			[[ ${args[0]} ]] &&
				_nextfs_complete_names "${args[0]}" "$cur"
			return ;;
		-o)
			_nextfs_complete_files "" "$cur"
			return ;;
		--resume)
			return ;;	# a token: nothing to offer
		esac
	fi
	if ((!ddash)) && [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(_nextfs_options "$cmd" "$sub")" \
			-- "$cur"))
		return
	fi
	kinds=($(_nextfs_arg_kinds "$cmd${sub:+ $sub}"))
	kind=${kinds[${#args[@]}]}
	((${#kinds[@]})) && [[ -z $kind && ${kinds[-1]} == rest ]] &&
		kind=rest
	case $kind in
	target|image|out|rest)	_nextfs_complete_files "" "$cur" ;;
	cmd)			COMPREPLY=($(compgen -c -- "$cur")) ;;
	dir)			_nextfs_complete_files -d "$cur" ;;
	snap)			_nextfs_complete_names "${args[0]}" "$cur" ;;
	esac
}

# nextfs-fuse's -o options: its own, the FUSE ones and the generic mount
# options libfuse passes to the kernel.  The help names more (as "-o NAME")
# if a later version adds any.
_nextfs_fuse_mount_options()
{
	echo ro rw read_ahead_kb= fakeroot snapshot_group= allow_other \
		allow_root auto_unmount \
		default_permissions fsname= subtype= max_read= \
		nosuid suid nodev dev noexec exec noatime atime \
		sync async dirsync
	"${_nextfs_cmd:-nextfs-fuse}" --help 2>/dev/null |
		grep -oE -- '-o [a-z_]+=?' | cut -c4-
}

# Complete the last entry of the comma-separated list in the -o argument
# WORD (as typed, "-o" prefix included when joined: "-oro,al").
_nextfs_fuse_complete_opts()
{
	local word=$1 head last o
	head=${word%,*}
	if [[ $head == "$word" ]]; then
		head=
		last=$word
	else
		head=$head,
		last=${word##*,}
	fi
	if [[ $last == -o* ]]; then
		head=-o
		last=${last#-o}
	fi
	[[ $last == *=* ]] && return	# a value: nothing to offer
	for o in $(_nextfs_fuse_mount_options | tr ' ' '\n' | sort -u); do
		[[ $o == "$last"* ]] && COMPREPLY+=("$head$o")
	done
	# Values follow "=" directly; bash replaces only the text after the
	# last "=" of COMP_WORDBREAKS, so give it that part.
	local replaced=${COMP_WORDS[COMP_CWORD]}
	if ((${#replaced} < ${#word})) && [[ $replaced != "=" ]]; then
		COMPREPLY=("${COMPREPLY[@]/#"${word:0:${#word}-${#replaced}}"}")
	fi
	if ((${#COMPREPLY[@]} == 1)) && [[ ${COMPREPLY[0]} == *= ]]; then
		compopt -o nospace 2>/dev/null
	fi
	return 0
}

_nextfs_fuse()
{
	local cur=${COMP_WORDS[COMP_CWORD]} line word prev i w npos=0
	local _nextfs_cmd=${COMP_WORDS[0]}
	COMPREPLY=()

	# The word as typed: COMP_WORDS splits at "=", which -o lists hold.
	line=${COMP_LINE:0:COMP_POINT}
	word=${line##*[[:space:]]}
	prev=${line%"$word"}
	prev=${prev%"${prev##*[![:space:]]}"}
	prev=${prev##*[[:space:]]}
	if [[ $prev == -o ]] || [[ $word == -o?* ]]; then
		_nextfs_fuse_complete_opts "$word"
		return
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W '-f -d -s -o -h --help -V --version' \
			-- "$cur"))
		return
	fi
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ $w == -o ]]; then
			((i++))
		elif [[ $w == = ]]; then
			((i++))		# "a=b" is three words in COMP_WORDS
		elif [[ $w != -* ]]; then
			((npos++))
		fi
	done
	case $npos in
	0) _nextfs_complete_files "" "$cur" ;;		# IMAGE_OR_DEVICE
	1) _nextfs_complete_files -d "$cur" ;;		# MOUNTPOINT
	esac
}

complete -F _nextfs nextfs
complete -F _nextfs_fuse nextfs-fuse
