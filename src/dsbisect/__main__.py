from dsbisect.cli.commands import main

main()
