from virtcap.commands.main import run

run()
